/**
 * Fork against real Docker, end to end through the daemon: three children equal to the parent at
 * fork time and independent of it and of each other afterwards, lineage in GET, the snapshot
 * reaped after its TTL, and the adversary's view: a child sees neither the parent's per-acquire
 * exec env (a rollout key) nor its gateway.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { createDockerProvider } from '../../providers/docker/index.ts';
import type { SandboxProvider, SandboxProviderFactory } from '../../providers/sandbox-provider.ts';
import { startTestDaemon, type TestDaemon } from '../../test/daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../../test/docker-available.ts';
import { waitFor } from '../../test/wait-for.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';

/** Docker as a provider without a native snapshot would be: the daemon must fall back to the archive. */
const dockerWithoutNativeSnapshot: SandboxProviderFactory = async (options, context) => {
  const provider = await createDockerProvider(options, context);
  return new Proxy(provider, {
    get(target, property) {
      if (property === 'capabilities') return { ...target.capabilities, snapshot: false };
      if (property === 'snapshot' || property === 'deleteSnapshot') return undefined;
      const value = Reflect.get(target, property, target) as unknown;
      return typeof value === 'function' ? value.bind(target) : value;
    },
  }) as SandboxProvider;
};

describe.skipIf(skipReason !== undefined)('fork against real Docker', () => {
  const namespace = `fork-${randomBytes(4).toString('hex')}`;
  let stateDir = '';
  let daemon: TestDaemon | undefined;

  afterAll(async () => {
    await daemon?.stop({ destroy: true });
    for (const container of await docker.listContainers({
      all: true,
      filters: { label: [`gym.namespace=${namespace}`] },
    })) {
      await docker.getContainer(container.Id).remove({ force: true });
    }
    for (const image of await docker.listImages({ filters: { reference: [`gym-snapshot/${namespace}`] } }))
      await docker
        .getImage(image.Id)
        .remove({ force: true })
        .catch(() => {});
    await rm(stateDir, { recursive: true, force: true });
  });

  it('falls back to an archive where the provider has no native snapshot: children equal, removals kept, the file reaped', async () => {
    const archiveStateDir = await mkdtemp(join(tmpdir(), 'gym-fork-archive-int-'));
    const archiveDaemon = await startTestDaemon(
      { namespace: `${namespace}-a`, stateDir: archiveStateDir, reaperIntervalMs: 200 },
      { factories: { docker: dockerWithoutNativeSnapshot }, listen: true },
    );
    try {
      const client = new GymClient({ url: archiveDaemon.address.url!, token: archiveDaemon.token });
      const parent = await client.createSandbox({ image: busybox, resources: { memoryMiB: 128 } });
      const shell = async (id: string, command: string) => (await client.exec(id, { command })).stdout.trim();
      await shell(parent.id, 'mkdir -p /work && echo v1 > /work/state && rm /bin/vi');
      const forked = await client.fork(parent.id, { count: 2, snapshotTtlSeconds: 1 });
      expect(forked.snapshot.method).toBe('archive');
      const file = join(archiveStateDir, 'snapshots', `${forked.snapshot.id}.tar`);
      expect((await stat(file)).mode & 0o777).toBe(0o600);
      for (const child of forked.sandboxes) {
        expect(
          await shell(child.id, 'cat /work/state; test -e /bin/vi && echo vi-back || echo vi-gone'),
        ).toBe('v1\nvi-gone');
      }
      await shell(forked.sandboxes[0]!.id, 'echo c0 > /work/state');
      expect(await shell(forked.sandboxes[1]!.id, 'cat /work/state')).toBe('v1');
      expect(await shell(parent.id, 'cat /work/state')).toBe('v1');
      await Promise.all(forked.sandboxes.map((child) => client.destroySandbox(child.id)));
      await waitFor(
        'the archive snapshot to be reaped',
        async () => (await client.listSnapshots()).length === 0,
      );
      await expect(stat(file)).rejects.toThrow();
    } finally {
      await archiveDaemon.stop({ destroy: true });
      await rm(archiveStateDir, { recursive: true, force: true });
    }
  });

  it('forks 3 children equal to the parent, independent afterwards, with lineage, and no parent secrets', async () => {
    stateDir = await mkdtemp(join(tmpdir(), 'gym-fork-int-'));
    daemon = await startTestDaemon({ namespace, stateDir, reaperIntervalMs: 200 }, { listen: true });
    const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    const rolloutKey = `gk-${randomBytes(16).toString('hex')}`;
    // The parent as a runner gets one: from a pool, with the rollout's key in its exec env.
    await client.definePool('rollouts', {
      spec: { image: busybox, resources: { memoryMiB: 128 } },
      minIdle: 0,
    });
    const parent = await client.createSandbox({ pool: 'rollouts', env: { GYM_ROLLOUT_KEY: rolloutKey } });
    const shell = async (id: string, command: string) => (await client.exec(id, { command })).stdout.trim();
    await shell(parent.id, 'mkdir -p /work && echo v1 > /work/state && echo kept > /work/other');
    expect(await shell(parent.id, 'echo $GYM_ROLLOUT_KEY')).toBe(rolloutKey);
    const reach = await client.exposeGateway(parent.id);
    // busybox's wget is unusable here; nc speaks enough HTTP to see whether anything answers.
    const { hostname, port } = new URL(reach.url);
    const gatewayProbe = `printf 'GET /v1/models HTTP/1.0\\r\\n\\r\\n' | nc -w 2 ${hostname} ${port} 2>&1; echo "exit=$?"`;
    const fromParent = (await client.exec(parent.id, { command: gatewayProbe })).stdout;
    expect(fromParent).toMatch(/^HTTP\/1\.1 \d{3} /);

    const forked = await client.fork(parent.id, { count: 3, snapshotTtlSeconds: 2, labels: { group: 'g1' } });
    const { snapshot, sandboxes: children } = forked;
    expect(children).toHaveLength(3);
    expect(snapshot).toMatchObject({
      method: 'native',
      provider: 'docker',
      sandboxId: parent.id,
      baseImage: busybox,
    });

    for (const [forkIndex, child] of children.entries()) {
      expect((await client.getSandbox(child.id)).lineage).toEqual({
        parent: parent.id,
        snapshot: snapshot.id,
        forkIndex,
      });
      expect(child.labels).toMatchObject({ group: 'g1', 'gym.fork.index': String(forkIndex) });
      expect(await shell(child.id, 'cat /work/state /work/other')).toBe('v1\nkept');
      // The adversary's view: neither the key nor the parent's gateway.
      expect(await shell(child.id, 'env')).not.toContain(rolloutKey);
      const inspected = await docker.getContainer(`gym-${namespace}-${child.id}`).inspect();
      expect(JSON.stringify(inspected.Config)).not.toContain(rolloutKey);
      const probe = await client.exec(child.id, { command: gatewayProbe });
      expect(probe.stdout).not.toContain('HTTP/1.1');
    }

    // Independent afterwards: each write stays where it was made.
    await shell(children[0]!.id, 'echo c0 > /work/state && rm /work/other');
    await shell(parent.id, 'echo p2 > /work/state');
    expect(await shell(children[0]!.id, 'cat /work/state; ls /work')).toBe('c0\nstate');
    expect(await shell(children[1]!.id, 'cat /work/state /work/other')).toBe('v1\nkept');
    expect(await shell(children[2]!.id, 'cat /work/state')).toBe('v1');
    expect(await shell(parent.id, 'cat /work/state /work/other')).toBe('p2\nkept');

    // The committed image carries the parent container's labels; an orphan scan still takes each
    // child for itself (no pool's, not the parent), and destroys nothing.
    expect(await daemon.manager.reconciler.reconcile('docker')).toMatchObject({ destroyed: 0, forgotten: 0 });
    for (const child of children) expect((await client.getSandbox(child.id)).pool).toBeNull();
    expect(daemon.pools.stats('rollouts')).toMatchObject({ leased: 1 });

    // The children go, the snapshot's TTL passes, the reaper removes it.
    await Promise.all(children.map((child) => client.destroySandbox(child.id)));
    await waitFor('the snapshot to be reaped', async () => (await client.listSnapshots()).length === 0);
    // (Its record leaves the listing as its removal starts; the image goes with the removal.)
    const images = async () =>
      (await docker.listImages({ filters: { reference: [`gym-snapshot/${namespace}`] } })).length;
    await waitFor('the snapshot image to be removed', async () => (await images()) === 0);
  });
});
