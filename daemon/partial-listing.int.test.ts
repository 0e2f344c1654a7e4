/**
 * A Docker engine that stops answering hides the daemon's sandboxes from its listing: they must be
 * kept and shown unreachable, never forgotten or destroyed, and be ready again once it answers.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { startTestDaemon } from '../test/daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../test/docker-available.ts';
import { SwitchableEngine } from '../test/switchable-engine.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';

describe.skipIf(skipReason !== undefined)('a Docker engine that stops answering', () => {
  it('keeps its sandboxes, shown unreachable, and shows them ready again when it answers', async () => {
    const directory = await mkdtemp(join(tmpdir(), 'gym-engine-outage-'));
    const engine = new SwitchableEngine(directory);
    await engine.up();
    const daemon = await startTestDaemon({
      namespace: `outage-${randomBytes(3).toString('hex')}`,
      providers: [{ name: 'docker', options: { socketPath: engine.path } }],
      destroyOnShutdown: true,
    });
    let isEngineUp = true;
    const state = async (id: string) =>
      (await daemon.app.inject({ url: `/v1/sandboxes/${id}`, headers: daemon.auth })).json().state;
    try {
      const created = await daemon.app.inject({
        method: 'POST',
        url: '/v1/sandboxes',
        headers: daemon.auth,
        payload: { image: busybox },
      });
      expect(created.statusCode).toBe(201);
      const { id } = created.json() as { id: string };

      await engine.down();
      isEngineUp = false;
      expect(await daemon.manager.reconciler.reconcile('docker')).toEqual({
        adopted: 0,
        destroyed: 0,
        forgotten: 0,
        unreachable: 1,
      });
      expect(await state(id)).toBe('unreachable');
      const listed = await daemon.app.inject({ url: '/v1/sandboxes', headers: daemon.auth });
      expect(listed.json().sandboxes).toEqual([expect.objectContaining({ id, state: 'unreachable' })]);

      await engine.up();
      isEngineUp = true;
      expect(await daemon.manager.reconciler.reconcile('docker')).toMatchObject({
        adopted: 1,
        unreachable: 0,
      });
      expect(await state(id)).toBe('ready');
      await daemon.manager.lifecycle.destroy(id);
      const left = await docker.listContainers({ all: true, filters: { label: [`gym.sandbox-id=${id}`] } });
      expect(left).toEqual([]);
    } finally {
      if (!isEngineUp) await engine.up();
      await daemon.cleanup();
      await engine.down();
      await rm(directory, { recursive: true, force: true });
    }
  }, 60_000);
});
