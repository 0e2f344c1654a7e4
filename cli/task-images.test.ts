import { describe, expect, it } from 'vitest';
import type { GymClient } from '../client/client.ts';
import { silentLogger } from '../core/logger.ts';
import type { PrepareImageRequest, PrepareImageResponse } from '../core/schemas/image.ts';
import { loadEnvironment } from '../environments/environment.ts';
import { taskImage } from '../environments/swe-mini/repository.ts';
import { SWE_MINI_TASKS } from '../environments/swe-mini/tasks.ts';
import { buildSweMiniImages } from './task-images.ts';

/** Records what it is asked to build and answers as a daemon that already had it. */
function recorder() {
  const asked: string[] = [];
  return {
    asked,
    async prepareImage(request: PrepareImageRequest): Promise<PrepareImageResponse> {
      const reference = 'reference' in request ? String(request.reference) : 'unknown';
      asked.push(reference);
      return { images: [{ reference, built: false }] } as unknown as PrepareImageResponse;
    },
  };
}

describe('swe-mini task images', () => {
  it('builds every task image without a filter, and only the named ones with one', async () => {
    const all = recorder();
    await buildSweMiniImages(all);
    expect(all.asked).toEqual(SWE_MINI_TASKS.map((task) => taskImage(task)));

    const one = recorder();
    const wanted = taskImage(SWE_MINI_TASKS[1]!);
    const seen: string[] = [];
    await buildSweMiniImages(one, (reference) => seen.push(reference), new Set([wanted]));
    expect(one.asked).toEqual([wanted]);
    expect(seen).toEqual([wanted]);
  });
});

describe("the swe kind's image preparation", () => {
  it("builds the run's rows' images of the swe-mini set, reports each, and goes on past a failed build", async () => {
    const environment = await loadEnvironment('swe-mini');
    const prepare = environment.implementation.prepareImages!;
    const wanted = taskImage(SWE_MINI_TASKS[2]!);
    const client = recorder();
    const events: string[] = [];
    await prepare({
      client: client as unknown as GymClient,
      environment,
      rows: [{ instance_id: 'x', image: wanted }],
      logger: silentLogger,
      onStart: (reference, index, total) => events.push(`start ${reference} ${index}/${total}`),
      onImage: (reference, built) => events.push(`image ${reference} ${built}`),
    });
    expect(client.asked).toEqual([wanted]);
    expect(events).toEqual([`start ${wanted} 0/1`, `image ${wanted} false`]);

    const notices: string[] = [];
    const failing = {
      prepareImage: async () => {
        throw new Error('no engine');
      },
    };
    await prepare({
      client: failing as unknown as GymClient,
      environment,
      rows: [{ instance_id: 'x', image: wanted }],
      logger: silentLogger,
      onNotice: (message) => notices.push(message),
    });
    expect(notices).toEqual(['could not build the task images (Error: no engine); using what exists']);

    // Another environment of the kind, without the image set: nothing asked.
    const none = recorder();
    await prepare({
      client: none as unknown as GymClient,
      environment: { ...environment, images: undefined },
      rows: [{ instance_id: 'x', image: wanted }],
      logger: silentLogger,
    });
    expect(none.asked).toEqual([]);
  });
});
