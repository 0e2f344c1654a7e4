/**
 * Issue 9: the API token administers sandboxes; it does not grant the host. Options that reach the
 * host (bind mounts, added capabilities, host networking, overwriting image tags) are refused
 * unless the operator's configuration allows them, and the refusal names the setting to change.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { InjectOptions } from 'fastify';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startTestDaemon, type TestDaemon } from '../daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../docker-available.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';

describe.skipIf(skipReason !== undefined)('options that reach the host are off unless configured', () => {
  const cleanups: Array<() => Promise<void>> = [];
  let locked: TestDaemon;
  let hostDir: string;

  beforeAll(async () => {
    hostDir = await mkdtemp(join(tmpdir(), 'gym-allowed-bind-'));
    cleanups.push(() => rm(hostDir, { recursive: true, force: true }));
    locked = await startTestDaemon({ namespace: `hostopts-${randomBytes(3).toString('hex')}` });
    cleanups.push(() => destroyAllAndStop(locked));
  });

  afterAll(async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => {});
  });

  const inject = (daemon: TestDaemon, options: InjectOptions) =>
    daemon.app.inject({ ...options, headers: { ...daemon.auth, ...options.headers } });
  const create = (daemon: TestDaemon, spec: Record<string, unknown>) =>
    inject(daemon, { method: 'POST', url: '/v1/sandboxes', payload: { image: busybox, ...spec } });

  interface ErrorBody {
    error: { code: string; message: string; details: { setting?: string } };
  }
  function expectRefused(response: { statusCode: number; body: string }, setting: string) {
    expect(response.statusCode, response.body).toBe(403);
    const { error } = JSON.parse(response.body) as ErrorBody;
    expect(error.code).toBe('FORBIDDEN_BY_CONFIG');
    expect(error.message).toContain(setting);
    expect(error.details.setting).toBe(setting);
  }

  async function destroyAllAndStop(daemon: TestDaemon): Promise<void> {
    const { sandboxes } = (await inject(daemon, { method: 'GET', url: '/v1/sandboxes' })).json() as {
      sandboxes: Array<{ id: string }>;
    };
    for (const { id } of sandboxes) await inject(daemon, { method: 'DELETE', url: `/v1/sandboxes/${id}` });
    await daemon.cleanup();
  }

  async function sandboxCount(daemon: TestDaemon): Promise<number> {
    return (await inject(daemon, { method: 'GET', url: '/v1/sandboxes' })).json().sandboxes.length;
  }

  it('refuses a bind of the engine socket, or of any host path, by default', async () => {
    for (const hostPath of ['/var/run/docker.sock', '/run', '/', hostDir]) {
      const response = await create(locked, {
        providerOptions: { readOnlyBinds: [{ hostPath, path: '/engine' }] },
      });
      expectRefused(response, 'allowedHostPaths');
    }
    expect(await sandboxCount(locked)).toBe(0);
  });

  it('refuses added capabilities, host networking and bridge networking by default', async () => {
    expectRefused(
      await create(locked, { providerOptions: { capAdd: ['SYS_ADMIN'] } }),
      'allowedCapabilities',
    );
    expectRefused(await create(locked, { network: 'host' }), 'allowedNetworkModes');
    expectRefused(await create(locked, { network: 'bridge' }), 'allowedNetworkModes');
    expect(await sandboxCount(locked)).toBe(0);
  });

  it('refuses a snapshot over the base image tag every other sandbox starts from', async () => {
    const before = (await docker.getImage(busybox).inspect()).Id;
    const created = await create(locked, {});
    expect(created.statusCode, created.body).toBe(201);
    const { id } = created.json();
    await inject(locked, {
      method: 'POST',
      url: `/v1/sandboxes/${id}/exec`,
      payload: { command: 'echo pwned > /pwned' },
    });
    try {
      for (const image of [busybox, 'gym/busybox:latest', 'docker.io/gym/busybox:latest']) {
        const response = await inject(locked, {
          method: 'POST',
          url: `/v1/sandboxes/${id}/snapshot`,
          payload: { image },
        });
        expectRefused(response, 'snapshotImagePrefixes');
      }
    } finally {
      // Should the attack succeed, put the shared base image back before anything else uses it.
      for (const reference of [busybox, 'gym/busybox:latest']) {
        const [repo, tag] = reference.split(':') as [string, string];
        if ((await docker.getImage(reference).inspect()).Id !== before)
          await docker.getImage(before).tag({ repo, tag });
      }
    }
    const allowed = `gym-snapshot/host-options:${id}`;
    const snapshot = await inject(locked, {
      method: 'POST',
      url: `/v1/sandboxes/${id}/snapshot`,
      payload: { image: allowed },
    });
    expect(snapshot.json()).toEqual({ image: allowed });
    await docker.getImage(allowed).remove({ force: true });
    await inject(locked, { method: 'DELETE', url: `/v1/sandboxes/${id}` });
  });

  it('allows exactly what the operator listed, and no path reached through a link out of it', async () => {
    const linkDir = await mkdtemp(join(tmpdir(), 'gym-bind-link-'));
    cleanups.push(() => rm(linkDir, { recursive: true, force: true }));
    await symlink('/run', join(linkDir, 'run'));
    const open = await startTestDaemon({
      namespace: `hostopts-${randomBytes(3).toString('hex')}`,
      providers: [
        {
          name: 'docker',
          options: {
            allowedHostPaths: [hostDir, linkDir],
            allowedCapabilities: ['NET_BIND_SERVICE'],
            allowedNetworkModes: ['none', 'host'],
            snapshotImagePrefixes: ['gym-snapshot/', 'team-a/'],
          },
        },
      ],
    });
    cleanups.push(() => destroyAllAndStop(open));
    const created = await create(open, {
      network: 'host',
      providerOptions: {
        capAdd: ['NET_BIND_SERVICE'],
        readOnlyBinds: [{ hostPath: `${hostDir}/.`, path: '/cache' }],
      },
    });
    expect(created.statusCode, created.body).toBe(201);
    const { id } = created.json();
    const mounted = await inject(open, {
      method: 'POST',
      url: `/v1/sandboxes/${id}/exec`,
      payload: { command: 'grep " /cache " /proc/mounts | grep -c " ro,"' },
    });
    expect(mounted.json().stdout.trim()).toBe('1');

    // Still refused: a capability not listed, the engine socket through a link in an allowed
    // directory, and a path that does not exist (the engine would create it on the host).
    expectRefused(await create(open, { providerOptions: { capAdd: ['SYS_ADMIN'] } }), 'allowedCapabilities');
    expectRefused(
      await create(open, {
        providerOptions: { readOnlyBinds: [{ hostPath: `${linkDir}/run`, path: '/r' }] },
      }),
      'allowedHostPaths',
    );
    const missing = await create(open, {
      providerOptions: { readOnlyBinds: [{ hostPath: `${hostDir}/missing`, path: '/m' }] },
    });
    expect(missing.statusCode).toBe(400);
    expect(missing.json().error.code).toBe('VALIDATION_FAILED');

    const snapshot = await inject(open, {
      method: 'POST',
      url: `/v1/sandboxes/${id}/snapshot`,
      payload: { image: `team-a/snap:${id}` },
    });
    expect(snapshot.json()).toEqual({ image: `team-a/snap:${id}` });
    await docker.getImage(`team-a/snap:${id}`).remove({ force: true });
    await inject(open, { method: 'DELETE', url: `/v1/sandboxes/${id}` });
  });
});
