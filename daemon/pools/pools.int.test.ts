import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { startTestDaemon, type TestDaemon } from '../../test/daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../../test/docker-available.ts';
import { waitFor } from '../../test/wait-for.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';

describe.skipIf(skipReason !== undefined)('pools against real Docker', () => {
  const namespace = `pool-${randomBytes(4).toString('hex')}`;
  let stateDir = '';
  let daemon: TestDaemon | undefined;

  const containers = async (state?: 'running') =>
    (
      await docker.listContainers({
        all: state === undefined,
        filters: { label: [`gym.namespace=${namespace}`, 'gym.pool=train'] },
      })
    ).map((container) => container.Labels['gym.sandbox-id']!);
  const start = async () => {
    daemon = await startTestDaemon({ namespace, stateDir }, { listen: true });
    return new GymClient({ url: daemon.address.url!, token: daemon.token });
  };

  afterAll(async () => {
    await daemon?.stop({ destroy: true });
    for (const container of await docker.listContainers({
      all: true,
      filters: { label: [`gym.namespace=${namespace}`] },
    })) {
      await docker.getContainer(container.Id).remove({ force: true });
    }
    await rm(stateDir, { recursive: true, force: true });
  });

  it('fills, serves warm then cold, never hands out a dead sandbox, survives a restart, and drains clean', async () => {
    stateDir = await mkdtemp(join(tmpdir(), 'gym-pool-int-'));
    let client = await start();
    await client.definePool('train', {
      spec: { image: busybox, resources: { memoryMiB: 128 } },
      minIdle: 4,
      maxTotal: 20,
    });
    await waitFor('the pool to fill to 4', async () => (await client.getPool('train')).idle === 4);
    expect(await containers()).toHaveLength(4);

    // 10 at once: 4 warm, 6 cold, all working.
    const acquired = await Promise.all(
      Array.from({ length: 10 }, (_, index) =>
        client.createSandbox({ pool: 'train', env: { TASK: `t${index}` } }),
      ),
    );
    expect(acquired.filter((sandbox) => sandbox.fromPool)).toHaveLength(4);
    expect(acquired.filter((sandbox) => !sandbox.fromPool)).toHaveLength(6);
    const outputs = await Promise.all(
      acquired.map((sandbox) => client.exec(sandbox.id, { command: 'echo $TASK' })),
    );
    expect(outputs.map((result) => result.stdout.trim()).sort()).toEqual(
      Array.from({ length: 10 }, (_, index) => `t${index}`).sort(),
    );
    await waitFor('the pool to refill', async () => (await client.getPool('train')).idle === 4);
    expect(await client.getPool('train')).toMatchObject({ hits: 4, misses: 6, leased: 10 });

    // A dead idle sandbox is discarded, never handed out.
    const idleIds = (await containers('running')).filter(
      (id) => !acquired.some((sandbox) => sandbox.id === id),
    );
    expect(idleIds).toHaveLength(4);
    await Promise.all(idleIds.map((id) => docker.getContainer(`gym-${namespace}-${id}`).kill()));
    const afterKill = await client.createSandbox({ pool: 'train' });
    expect(idleIds).not.toContain(afterKill.id);
    expect((await client.exec(afterKill.id, { argv: ['echo', 'alive'] })).stdout).toBe('alive\n');
    expect((await client.getPool('train')).discarded).toBe(4);
    await Promise.all([...acquired, afterKill].map((sandbox) => client.destroySandbox(sandbox.id)));
    await waitFor(
      'the pool to refill after the kills',
      async () => (await client.getPool('train')).idle === 4,
    );

    // A restart (kept sandboxes) re-adopts the idle ones: same ids, still warm.
    const idleBefore = (await containers()).sort();
    expect(idleBefore).toHaveLength(4);
    await daemon!.stop();
    client = await start();
    const stats = await client.getPool('train');
    expect(stats.idle).toBe(4);
    expect((await containers()).sort()).toEqual(idleBefore);
    const warm = await client.createSandbox({ pool: 'train' });
    expect(warm.fromPool).toBe(true);
    expect(idleBefore).toContain(warm.id);
    await client.destroySandbox(warm.id);

    // Deleting the pool leaves no idle container behind.
    await client.removePool('train');
    await waitFor('the idle containers to go', async () => (await containers()).length === 0, 15_000);
    expect(await client.listPools()).toEqual([]);
  });
});
