import { describe, expect, it } from 'vitest';
import type { PrepareImageRequest, PrepareImageResponse } from '../core/schemas/image.ts';
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
