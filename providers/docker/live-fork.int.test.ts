/**
 * Live snapshots on Docker under gVisor (live-fork.ts): children carry the parent's running
 * processes and their memory, the parent carries on, and what cannot be restored is refused
 * before the parent is touched. Needs the runsc tier and an engine started with --experimental
 * (scripts/setup.sh); in CI a missing one fails instead of skipping.
 */
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { GymError } from '../../core/errors.ts';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { spawnDaemonProcess, startTestDaemon } from '../../test/daemon-harness.ts';
import { dockerTestEnvironment, isDockerRequired, testImage } from '../../test/docker-available.ts';
import { dockerTier } from '../../test/docker-tiers.ts';
import { testContext } from '../../test/fixtures/provider-context.ts';
import { waitFor } from '../../test/wait-for.ts';
import type { SnapshotResult } from '../sandbox-provider.ts';
import { DockerProvider } from './docker-provider.ts';

const { docker, skipReason: engineSkip } = await dockerTestEnvironment();
const gvisor = engineSkip === undefined ? await dockerTier('runsc') : undefined;
const experimental =
  engineSkip === undefined && gvisor?.skipReason === undefined
    ? ((await docker.info()) as { ExperimentalBuild?: boolean }).ExperimentalBuild === true
    : false;
const skipReason =
  engineSkip ??
  gvisor?.skipReason ??
  (experimental
    ? undefined
    : 'the Docker engine runs without --experimental (scripts/setup.sh starts it so)');
if (skipReason !== undefined && isDockerRequired)
  throw new Error(`GYM_REQUIRE_DOCKER=1 but live fork cannot be tried: ${skipReason}`);
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';
/** A glibc userland, whose shell runs the tools on disk (busybox's runs its own applets whatever /bin holds). */
const debian = skipReason === undefined ? await testImage(docker, 'debian-base') : 'gym/debian-base:missing';

const stateDirectory = await mkdtemp(join(tmpdir(), 'gym-live-fork-'));
afterAll(() => rm(stateDirectory, { recursive: true, force: true }));

const run = (provider: DockerProvider, id: string, command: string) =>
  provider.exec(id, parseOrThrow(ExecRequestSchema, { command }, 'exec'));

/**
 * A counter whose value lives in the shell's memory; the file only shows it, replaced whole each
 * time (a plain `>` truncates first, and a checkpoint taken between the truncation and the write
 * gives a child an empty file until the process writes again).
 */
const COUNTER =
  "sh -c 'i=0; while :; do i=$((i+1)); echo $i > /count.new && mv /count.new /count; sleep 0.05; done' >/dev/null 2>&1 </dev/null &";

async function count(provider: DockerProvider, id: string): Promise<number> {
  const result = await run(provider, id, 'cat /count');
  expect(result.status).toBe('ok');
  return Number(result.stdout.trim());
}

/** Waits until sandbox `id`'s counter reaches `atLeast`. */
const counted = (provider: DockerProvider, id: string, atLeast: number) =>
  waitFor(`sandbox ${id} counting to ${atLeast}`, async () => (await count(provider, id)) >= atLeast, 20_000);

/** The counter's value now, once it has been seen to go on from it (its process runs). */
async function countsOn(provider: DockerProvider, id: string): Promise<number> {
  const first = await count(provider, id);
  await counted(provider, id, first + 1);
  return first;
}

/** What this file's checkpoints folder holds of snapshot `name`. */
const kept = async (name: string) =>
  (await readdir(join(stateDirectory, 'checkpoints')).catch(() => [] as string[])).filter((entry) =>
    entry.includes(name),
  );

const imageGone = (name: string) =>
  expect(gvisor!.docker.getImage(`gym-snapshot/test:${name}`).inspect()).rejects.toMatchObject({
    statusCode: 404,
  });

describe.skipIf(skipReason !== undefined)('docker live fork under gVisor', () => {
  const provider =
    skipReason === undefined
      ? new DockerProvider(gvisor!.docker, testContext({ stateDirectory }), gvisor!.providerOptions)
      : (undefined as unknown as DockerProvider);
  const spec = (image = busybox) => parseOrThrow(SandboxSpecSchema, { image }, 'spec');
  afterAll(() => provider?.close());
  /** What a case made, destroyed after it whatever it did. */
  const made: string[] = [];
  afterEach(async () => {
    for (const id of made.splice(0)) await provider.destroy(id).catch(() => {});
  });
  const sandbox = async (image?: string) => {
    const { id } = await provider.create(spec(image));
    made.push(id);
    return id;
  };
  /** A sandbox running the counter, seen at `atLeast`. */
  const counting = async (atLeast: number) => {
    const id = await sandbox();
    expect((await run(provider, id, COUNTER)).status).toBe('ok');
    await counted(provider, id, atLeast);
    return id;
  };
  const live = (id: string, name: string, options: { maxBytes?: number } = {}) =>
    provider.snapshot(id, { image: '', managedId: name, live: true, ...options });
  const refused = async (id: string, name: string, options: { maxBytes?: number } = {}) => {
    const error = (await live(id, name, options).catch((caught: unknown) => caught)) as GymError;
    expect(error).toBeInstanceOf(GymError);
    return error;
  };
  const restored = async (snapshot: SnapshotResult) => {
    const { id } = await provider.create(
      { ...spec(), image: snapshot.image },
      { restore: snapshot.checkpoint! },
    );
    made.push(id);
    return id;
  };

  it('declares liveFork only under gVisor, and its health says the engine is ready for it', async () => {
    expect(provider.capabilities.liveFork).toBe(true);
    expect((await provider.health()).details).toMatchObject({ liveFork: 'ready' });
    const runc = new DockerProvider(docker, testContext());
    expect(runc.capabilities.liveFork).toBe(false);
    expect((await runc.health()).details).not.toHaveProperty('liveFork');
  });

  it('starts children with the parent running process and its memory; the parent carries on', {
    timeout: 120_000,
  }, async () => {
    const parent = await counting(10);
    const snapshot = await live(parent, 'snp_livetest0000001');
    expect(snapshot.checkpoint).toBe('snp_livetest0000001');
    const atFork = await count(provider, parent);
    const children = [await restored(snapshot), await restored(snapshot)];
    for (const child of children) {
      // The counter went on from the value it held in memory, not from 1: its process was carried over.
      const first = await countsOn(provider, child);
      expect(first).toBeGreaterThanOrEqual(10);
      expect(first).toBeLessThan(atFork + 40);
    }
    // The parent kept its own process, which goes on counting.
    await countsOn(provider, parent);
    // After the fork each is its own sandbox.
    expect((await run(provider, children[0]!, 'echo child0 > /mine')).status).toBe('ok');
    expect((await run(provider, parent, 'cat /mine')).exitCode).not.toBe(0);
    expect((await run(provider, children[1]!, 'cat /mine')).exitCode).not.toBe(0);
    expect(await kept('snp_livetest0000001')).toContain('snp_livetest0000001');
    await provider.deleteSnapshot(snapshot.image);
    expect(await kept('snp_livetest0000001')).toEqual([]);
    await imageGone('snp_livetest0000001');
  });

  it("carries the guest's /tmp (a volume under gVisor) over, a file held open there included", {
    timeout: 90_000,
  }, async () => {
    const parent = await sandbox();
    const holder =
      "echo kept > /tmp/held && sh -c 'exec 3</tmp/held; while :; do sleep 1; done' >/dev/null 2>&1 </dev/null & echo ok";
    expect((await run(provider, parent, holder)).stdout).toBe('ok\n');
    const snapshot = await live(parent, 'snp_livetest0000007');
    expect((await run(provider, await restored(snapshot), 'cat /tmp/held')).stdout).toBe('kept\n');
    await provider.deleteSnapshot(snapshot.image);
    expect(await kept('snp_livetest0000007')).toEqual([]);
  });

  it('bounds the snapshot while it is taken: a /tmp past maxBytes fails it, and the parent keeps its processes', {
    timeout: 90_000,
  }, async () => {
    const parent = await counting(5);
    expect((await run(provider, parent, 'head -c 8388608 /dev/zero > /tmp/big')).exitCode).toBe(0);
    const error = await refused(parent, 'snp_livetest0000008', { maxBytes: 4 * 1024 * 1024 });
    expect(error.code).toBe('SNAPSHOT_TOO_LARGE');
    // Restored from its own checkpoint: the counter goes on from its value, nothing was kept.
    expect(await countsOn(provider, parent)).toBeGreaterThanOrEqual(5);
    expect(await kept('snp_livetest0000008')).toEqual([]);
    await imageGone('snp_livetest0000008');
  });

  it('a daemon killed during a live snapshot: the next provider starts the parent again from its checkpoint and removes the half-made snapshot', {
    timeout: 90_000,
  }, async () => {
    const parent = await counting(5);
    // What a kill -9 after the checkpoint and the commit leaves: the marker, the stopped
    // parent with its checkpoint, the committed image, no record.
    const name = 'snp_livetest0000009';
    const containerName = provider.containerName(parent);
    const image = `gym-snapshot/test:${name}`;
    const container = gvisor!.docker.getContainer(containerName);
    await mkdir(join(stateDirectory, 'checkpoints'), { recursive: true });
    await writeFile(
      join(stateDirectory, 'checkpoints', `${name}.interrupted.json`),
      JSON.stringify({ sandboxId: parent, container: containerName, image }),
    );
    await (container as unknown as { createCheckpoint(options: object): Promise<unknown> }).createCheckpoint({
      CheckpointID: name,
      Exit: true,
    });
    // As the provider's commit labels it: a snapshot of this namespace, which alone is removed.
    await container.commit({
      _query: {
        container: containerName,
        repo: 'gym-snapshot/test',
        tag: name,
        changes: ['LABEL gym.snapshot.namespace=test'],
      },
      _body: {},
    });
    expect((await container.inspect()).State.Running).toBe(false);

    const next = new DockerProvider(gvisor!.docker, testContext({ stateDirectory }), gvisor!.providerOptions);
    try {
      expect(await next.resumeInterruptedSnapshots()).toEqual([parent]);
      expect(await countsOn(next, parent)).toBeGreaterThanOrEqual(5);
      expect(await kept(name)).toEqual([]);
      await imageGone(name);
    } finally {
      await next.close();
    }
  });

  it('refuses, before the parent is stopped, a process holding the stream of an ended command', {
    timeout: 90_000,
  }, async () => {
    const parent = await sandbox();
    expect((await run(provider, parent, 'sleep 1000 & echo started')).stdout).toBe('started\n');
    const pidBefore = (await run(provider, parent, 'pgrep -x sleep || pidof sleep')).stdout;
    const error = await refused(parent, 'snp_livetest0000002');
    expect(error.code).toBe('SANDBOX_NOT_READY');
    expect(error.message).toMatch(/sleep/);
    // Untouched: the same process runs, and nothing of the snapshot was kept.
    expect((await run(provider, parent, 'pgrep -x sleep || pidof sleep')).stdout).toBe(pidBefore);
    await imageGone('snp_livetest0000002');
  });

  it('is not fooled by an agent that replaces the image tools a listing would use', {
    timeout: 90_000,
  }, async () => {
    const parent = await sandbox(debian);
    // The listing is the host's read-only helper: faking readlink, sed, cat and ls hides nothing.
    const fake =
      'sleep 1000 & for tool in readlink sed cat ls ps; do rm -f /bin/$tool /usr/bin/$tool; printf "#!/bin/sh\\nexit 0\\n" > /bin/$tool; chmod +x /bin/$tool; done; echo faked';
    expect((await run(provider, parent, fake)).stdout).toBe('faked\n');
    const error = await refused(parent, 'snp_livetest0000006');
    expect(error.code).toBe('SANDBOX_NOT_READY');
    expect(error.message).toMatch(/sleep/);
    expect((await run(provider, parent, 'echo still-here')).stdout).toBe('still-here\n');
  });

  it('ends the parent sessions for the checkpoint; the next session command opens a fresh shell', {
    timeout: 90_000,
  }, async () => {
    const parent = await sandbox();
    const inSession = (command: string) =>
      provider.exec(parent, parseOrThrow(ExecRequestSchema, { command, session: 'main' }, 'exec'));
    expect((await inSession('export MARK=in-shell; echo $MARK')).stdout).toBe('in-shell\n');
    const snapshot = await live(parent, 'snp_livetest0000005');
    const child = await restored(snapshot);
    // A new shell: the old one's variable is gone, and the session works.
    expect((await inSession('echo "[${MARK:-}]"')).stdout).toBe('[]\n');
    expect((await run(provider, child, 'echo child')).stdout).toBe('child\n');
    await provider.deleteSnapshot(snapshot.image);
  });

  it('takes two live snapshots asked for at once one after the other, both whole', {
    timeout: 120_000,
  }, async () => {
    const parent = await counting(5);
    const snapshots = await Promise.all([
      live(parent, 'snp_livetest000000a'),
      live(parent, 'snp_livetest000000b'),
    ]);
    for (const snapshot of snapshots) await countsOn(provider, await restored(snapshot));
    for (const snapshot of snapshots) await provider.deleteSnapshot(snapshot.image);
  });

  it('refuses while a command runs in the parent, and says to retry', { timeout: 90_000 }, async () => {
    const parent = await sandbox();
    const running = run(provider, parent, 'sleep 2; echo done');
    await new Promise((resolve) => setTimeout(resolve, 300));
    const error = await refused(parent, 'snp_livetest0000003');
    expect(error.code).toBe('SANDBOX_NOT_READY');
    expect(error.details).toMatchObject({ retryable: true, running: 1 });
    expect((await running).stdout).toBe('done\n');
  });

  it('refuses a live snapshot under runc with CAPABILITY_UNSUPPORTED', { timeout: 60_000 }, async () => {
    const runc = new DockerProvider(docker, testContext({ stateDirectory }));
    const parent = await runc.create(spec());
    try {
      await expect(
        runc.snapshot(parent.id, { image: '', managedId: 'snp_livetest0000004', live: true }),
      ).rejects.toMatchObject({ code: 'CAPABILITY_UNSUPPORTED' });
    } finally {
      await runc.destroy(parent.id);
      await runc.close();
    }
  });
});

describe.skipIf(skipReason !== undefined)('live fork through the daemon, Docker under gVisor', () => {
  it('forks two live children with lineage, and a pool of a live snapshot hands out running copies', {
    timeout: 180_000,
  }, async () => {
    const daemon = await startTestDaemon(
      {
        namespace: `live-${Math.random().toString(36).slice(2, 8)}`,
        providers: [{ name: 'docker', options: { ...gvisor!.providerOptions } }],
      },
      { listen: true },
    );
    const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    const counted = async (id: string) =>
      Number((await client.exec(id, { command: 'cat /count' })).stdout.trim());
    try {
      const parent = await client.createSandbox({ image: busybox });
      await client.exec(parent.id, { command: COUNTER });
      await waitFor('the counter at 10', async () => (await counted(parent.id)) >= 10, 20_000);
      const forked = await client.fork(parent.id, { count: 2, live: true, labels: { group: 'live' } });
      expect(forked.snapshot).toMatchObject({ method: 'native', live: true, sandboxId: parent.id });
      for (const [forkIndex, child] of forked.sandboxes.entries()) {
        expect((await client.getSandbox(child.id)).lineage).toEqual({
          parent: parent.id,
          snapshot: forked.snapshot.id,
          forkIndex,
        });
        const first = await counted(child.id);
        expect(first).toBeGreaterThanOrEqual(10);
        await waitFor('a child counting on', async () => (await counted(child.id)) > first, 20_000);
      }
      // A live child forks live in turn: its restored guest checkpoints again.
      const grandchild = (await client.fork(forked.sandboxes[0]!.id, { count: 1, live: true })).sandboxes[0]!;
      const grandFirst = await counted(grandchild.id);
      expect(grandFirst).toBeGreaterThanOrEqual(10);
      await waitFor(
        'the grandchild counting on',
        async () => (await counted(grandchild.id)) > grandFirst,
        20_000,
      );
      const parentNow = await counted(parent.id);
      await waitFor('the parent counting on', async () => (await counted(parent.id)) > parentNow, 20_000);
      expect((await client.getSandbox(parent.id)).state).toBe('ready');

      // A live snapshot as a pool's image: each member starts with the counter running.
      const snapshot = await client.createSnapshot(parent.id, { live: true });
      expect(snapshot.live).toBe(true);
      await client.definePool('live-warm', { spec: { image: snapshot.image }, minIdle: 1 });
      const member = await client.createSandbox({ pool: 'live-warm' });
      const memberFirst = await counted(member.id);
      expect(memberFirst).toBeGreaterThanOrEqual(10);
      await waitFor('the member counting on', async () => (await counted(member.id)) > memberFirst, 20_000);
    } finally {
      await daemon.stop({ destroy: true });
      await rm(daemon.stateDir, { recursive: true, force: true });
    }
  });
});

describe.skipIf(skipReason !== undefined)(
  'a daemon killed -9 during a live fork, Docker under gVisor',
  () => {
    it('starts the stopped parent again from its checkpoint at its next start, and leaves no half-made snapshot', {
      timeout: 180_000,
    }, async () => {
      const namespace = `livecrash-${Math.random().toString(36).slice(2, 8)}`;
      const stateDir = await mkdtemp(join(tmpdir(), 'gym-live-crash-'));
      const configPath = join(stateDir, 'gym.yaml');
      await writeFile(
        configPath,
        JSON.stringify({
          stateDir,
          namespace,
          listen: { host: '127.0.0.1', port: 0 },
          logLevel: 'warn',
          providers: [{ name: 'docker', options: { ...gvisor!.providerOptions } }],
        }),
      );
      let started = await spawnDaemonProcess(configPath, stateDir);
      const ours = async () =>
        (await docker.listContainers({ all: true, filters: { label: [`gym.namespace=${namespace}`] } })).map(
          (container) => container.Id,
        );
      try {
        const parent = await started.client.createSandbox({ image: busybox });
        const counted = async (client: GymClient) => {
          const result = await client.exec(parent.id, { command: 'cat /count' });
          expect(result, JSON.stringify(result)).toMatchObject({ status: 'ok', exitCode: 0 });
          return Number(result.stdout.trim());
        };
        await started.client.exec(parent.id, { command: COUNTER });
        await waitFor('the counter at 10', async () => (await counted(started.client)) >= 10, 20_000);
        const container = docker.getContainer(`gym-${namespace}-${parent.id}`);
        const forking = started.client.fork(parent.id, { count: 2, live: true }).catch(() => null);
        // Killed while the checkpoint has the parent stopped (the window is most of a second).
        await waitFor(
          'the parent stopped by its checkpoint',
          async () => !(await container.inspect()).State.Running,
          20_000,
          5,
        );
        started.child.kill('SIGKILL');
        await new Promise((resolve) => started.child.once('exit', resolve));
        await forking;
        expect((await container.inspect()).State.Running).toBe(false);

        started = await spawnDaemonProcess(configPath, stateDir);
        expect((await started.client.getSandbox(parent.id)).state).toBe('ready');
        const resumed = await counted(started.client);
        expect(resumed).toBeGreaterThanOrEqual(10);
        await waitFor(
          'the parent counting on',
          async () => (await counted(started.client)) > resumed,
          20_000,
        );
        // Nothing of the half-made fork: no snapshot, its image, its files, or a child.
        expect(await started.client.listSnapshots()).toEqual([]);
        expect(await docker.listImages({ filters: { reference: [`gym-snapshot/${namespace}`] } })).toEqual(
          [],
        );
        expect(await readdir(join(stateDir, 'providers', 'docker', 'checkpoints'))).toEqual([]);
        expect((await ours()).length).toBe(1);
      } finally {
        started.child.kill('SIGKILL');
        for (const id of await ours())
          await docker
            .getContainer(id)
            .remove({ force: true })
            .catch(() => {});
        await rm(stateDir, { recursive: true, force: true });
      }
    });
  },
);
