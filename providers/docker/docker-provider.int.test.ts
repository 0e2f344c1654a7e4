import { randomBytes } from 'node:crypto';
import { readdirSync, readlinkSync } from 'node:fs';
import { afterAll, describe, expect, it } from 'vitest';
import { GymError } from '../../core/errors.ts';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { type SandboxSpecInput, SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { DEFAULT_RESOURCES } from '../../daemon/config.ts';
import { dockerTestEnvironment, testImage } from '../../test/docker-available.ts';
import { dockerTier } from '../../test/docker-tiers.ts';
import { testContext } from '../../test/fixtures/provider-context.ts';
import { relayBinaryForTests } from '../../test/relay-binary.ts';
import { waitFor } from '../../test/wait-for.ts';
import { describeSandboxProviderContract } from '../contract/index.ts';
import { BUILD_DEADLINE_LABEL, BUILD_LABEL, isBuildContainerName } from './docker-images.ts';
import { DEFAULT_BUILD_RESOURCES, DockerProvider } from './docker-provider.ts';
import { createDockerClient, createDockerProvider } from './index.ts';
import { EXEC_HELPER_MOUNT } from './one-shot-exec.ts';
import { guestCommandLines } from './runtime-tier.ts';
import { managedSnapshotImage } from './snapshot.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';
const debian = skipReason === undefined ? await testImage(docker, 'debian-base') : 'gym/debian-base:missing';
const debianMissing =
  skipReason === undefined &&
  !(await docker
    .getImage(debian)
    .inspect()
    .then(
      () => true,
      () => false,
    ))
    ? 'the debian-base image is not built (run `bin/gym image build debian-base`)'
    : undefined;

/** The contract's snapshot case leaves its image to us. */
const removeImage = async (image: string) => {
  await docker.getImage(image).remove({ force: true });
};

/** The build containers of a plan image still there (none once its build ended, however). */
const buildLeftovers = async (reference: string) =>
  (await docker.listContainers({ all: true, filters: { label: [`${BUILD_LABEL}=${reference}`] } })).filter(
    (container) => container.Names.some(isBuildContainerName),
  ).length;

describeSandboxProviderContract({
  name: 'docker (busybox)',
  image: busybox,
  // A relay as new as its source (the port cases need its connect mode).
  createProvider: () => new DockerProvider(docker, testContext(), { relayHelperPath: relayBinaryForTests() }),
  removeImage,
  buildLeftovers,
  createUnreachableProvider: () =>
    new DockerProvider(createDockerClient({ socketPath: '/nonexistent/docker.sock' }), testContext()),
  ...(skipReason === undefined ? {} : { skipReason }),
});

// The same contract over a glibc userland (dash, coreutils, procps), where SWE tasks run.
describeSandboxProviderContract({
  name: 'docker (debian-base)',
  image: debian,
  createProvider: () => new DockerProvider(docker, testContext(), { relayHelperPath: relayBinaryForTests() }),
  removeImage,
  ...((skipReason ?? debianMissing) === undefined ? {} : { skipReason: skipReason ?? debianMissing }),
});

// The same contract under gVisor and on Podman's engine (docs/isolation-tiers.md), over busybox
// only: the glibc userland adds nothing a runtime or engine treats differently.
for (const name of ['runsc', 'podman'] as const) {
  const tier = skipReason === undefined ? await dockerTier(name, [busybox]) : undefined;
  describeSandboxProviderContract({
    name: `docker (busybox, ${name})`,
    image: busybox,
    createProvider: () =>
      new DockerProvider(tier!.docker, testContext(), {
        ...tier!.providerOptions,
        relayHelperPath: relayBinaryForTests(),
      }),
    removeImage: (image) => tier!.docker.getImage(image).remove({ force: true }),
    capabilities: tier?.capabilities ?? {},
    testTimeoutMs: 90_000,
    ...((skipReason ?? tier?.skipReason) === undefined ? {} : { skipReason: skipReason ?? tier?.skipReason }),
  });
}

describe.skipIf(skipReason !== undefined)('docker provider specifics', () => {
  const context = testContext();
  const provider = new DockerProvider(docker, context);
  const created: string[] = [];
  const spec = (overrides: Partial<SandboxSpecInput> = {}) =>
    parseOrThrow(SandboxSpecSchema, { image: busybox, ...overrides }, 'spec');
  const run = (id: string, command: string) =>
    provider.exec(id, parseOrThrow(ExecRequestSchema, { command }, 'exec'));

  afterAll(async () => {
    await Promise.all(created.map((id) => provider.destroy(id)));
    await provider.close();
  });

  it('labels the container under one namespace, with ids, lease and deadline', async () => {
    const info = await provider.create(spec({ labels: { task: 't1' }, ttlSeconds: 120 }), { pool: 'p1' });
    created.push(info.id);
    const inspected = await docker.getContainer(provider.containerName(info.id)).inspect();
    const labels = inspected.Config.Labels;
    expect(labels).toMatchObject({
      'gym.namespace': 'test',
      'gym.daemon-id': context.daemonId,
      'gym.sandbox-id': info.id,
      'gym.pool': 'p1',
      'gym.user.task': 't1',
    });
    const leaseMs = Number(labels['gym.lease-expires-at']) - Number(labels['gym.created-at']);
    expect(leaseMs).toBe(120_000);
    expect(Number(labels['gym.deadline-at']) - Number(labels['gym.created-at'])).toBe(3600_000);
    expect(info.pool).toBe('p1');
    // Labels hold identity only: the image is read back from the container's own config.
    expect(labels['gym.image']).toBeUndefined();
    expect((await provider.get(info.id)).image).toBe(busybox);
  });

  it('runs an init that reaps zombies, drops capabilities, and forbids new privileges', async () => {
    const info = await provider.create(spec({ resources: { cpus: 0.5, memoryMiB: 128, pidsLimit: 64 } }));
    created.push(info.id);
    const init = await run(info.id, 'cat /proc/1/comm');
    // The exec helper's keeper when it is built (tini otherwise): PID 1 reaps orphans either way.
    expect(init.stdout.trim()).toMatch(/^(\.gym-exec|docker-init|tini)$/);
    // An orphaned child whose parent exits becomes a zombie unless PID 1 reaps it.
    await run(info.id, 'sh -c "sleep 0.2 & exit 0"; sleep 0.6');
    const zombies = await run(info.id, "grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l");
    expect(zombies.stdout.trim()).toBe('0');
    const status = await run(info.id, 'grep -E "^(CapEff|NoNewPrivs)" /proc/self/status');
    const capEff = BigInt(`0x${/CapEff:\s*([0-9a-f]+)/.exec(status.stdout)?.[1]}`);
    // CHOWN 0, DAC_OVERRIDE 1, FOWNER 3, FSETID 4, KILL 5, SETGID 6, SETUID 7 (linux/capability.h).
    const allowedBits = [0, 1, 3, 4, 5, 6, 7].reduce((mask, bit) => mask | (1n << BigInt(bit)), 0n);
    expect(capEff & ~allowedBits).toBe(0n);
    expect(status.stdout).toMatch(/NoNewPrivs:\s*1/);
    const hostConfig = (await docker.getContainer(provider.containerName(info.id)).inspect()).HostConfig;
    expect(hostConfig).toMatchObject({
      NanoCpus: 500_000_000,
      Memory: 128 * 1024 * 1024,
      PidsLimit: 64,
      NetworkMode: 'none',
    });
  });

  it('commits a snapshot that a new sandbox can start from', async () => {
    const info = await provider.create(spec());
    created.push(info.id);
    await provider.writeFile(info.id, '/root/state.txt', Buffer.from('kept'));
    const image = `gym-snapshot/test-snapshot:${info.id}`;
    expect(await provider.snapshot(info.id, { image })).toMatchObject({ image });
    try {
      const restored = await provider.create(spec({ image }));
      created.push(restored.id);
      expect((await run(restored.id, 'cat /root/state.txt')).stdout).toBe('kept');
    } finally {
      await Promise.all(created.splice(0).map((id) => provider.destroy(id)));
      await docker.getImage(image).remove({ force: true });
    }
  });

  it('commits a managed snapshot under its own name, never over an image that is not a snapshot, without the parent env or labels', async () => {
    const info = await provider.create(
      spec({ env: { SPEC_TOKEN: 'parent-value' }, labels: { task: 'parent' } }),
    );
    created.push(info.id);
    const squatted = managedSnapshotImage(context.namespace, 'snp_squatted000000000');
    const [repo, tag] = squatted.split(':');
    await docker.getImage(busybox).tag({ repo: repo!, tag: tag! });
    try {
      const refused = await provider
        .snapshot(info.id, { image: '', managedId: 'snp_squatted000000000' })
        .catch((error: unknown) => error);
      expect((refused as GymError).code).toBe('FORBIDDEN_BY_CONFIG');
      await expect(provider.deleteSnapshot(squatted)).rejects.toMatchObject({ code: 'FORBIDDEN_BY_CONFIG' });
    } finally {
      await docker.getImage(squatted).remove();
    }
    const made = await provider.snapshot(info.id, {
      image: '',
      managedId: 'snp_madebytest000000',
      labels: { expires: '1' },
    });
    try {
      expect(made.image).toBe(managedSnapshotImage(context.namespace, 'snp_madebytest000000'));
      const config = (await docker.getImage(made.image).inspect()).Config;
      expect(config.Env).toContain('SPEC_TOKEN=');
      expect(JSON.stringify(config)).not.toContain('parent-value');
      expect(config.Labels).toMatchObject({
        'gym.snapshot.namespace': context.namespace,
        'gym.snapshot.label.expires': '1',
        'gym.user.task': '',
      });
    } finally {
      await provider.deleteSnapshot(made.image);
      await Promise.all(created.splice(0).map((id) => provider.destroy(id)));
    }
  });

  it("carries a confined session's bytes over pipes between the daemon and the shell, not through the engine", async () => {
    expect(provider.capabilities.timeoutKill).toBe('cgroup');
    const info = await provider.create(spec());
    created.push(info.id);
    const session = (command: string, timeoutMs = 20_000) =>
      provider.exec(
        info.id,
        parseOrThrow(ExecRequestSchema, { command, session: 'pipes', timeoutMs }, 'exec'),
      );
    const ours = () =>
      new Set(
        readdirSync('/proc/self/fd').map((fd) => {
          try {
            return readlinkSync(`/proc/self/fd/${fd}`);
          } catch {
            return '';
          }
        }),
      );
    // The session shell's stdin, stdout and stderr (each command runs in a child of it).
    const shellPipes = async () =>
      (await session('for fd in 0 1 2; do readlink /proc/$PPID/fd/$fd; done')).stdout.trim().split('\n');
    // Their other ends are in this process (the provider runs in it), not in the engine's shim.
    const first = await shellPipes();
    expect(first).toHaveLength(3);
    for (const pipe of first) {
      expect(pipe).toMatch(/^pipe:\[\d+\]$/);
      expect(ours().has(pipe)).toBe(true);
    }
    // The helper's own ends are closed before the shell runs: nothing of the sandbox can read its
    // output or write its next command through them.
    expect((await session('ls /proc/$PPID/fd')).stdout.trim().split('\n').sort()).toEqual(['0', '1', '2']);
    // Output in both streams, exact to the byte, a timeout, and a fresh shell after it.
    const result = await session("printf 'out'; printf 'err' >&2; exit 3");
    expect(result).toMatchObject({ status: 'ok', exitCode: 3, stdout: 'out', stderr: 'err' });
    expect((await session('sleep 30', 300)).status).toBe('timeout');
    expect((await session('echo again')).stdout).toBe('again\n');
    // A shell the agent kills takes the session with it, and the daemon lets go of all three pipes.
    const second = await shellPipes();
    expect((await session('kill -9 $PPID')).status).toBe('killed');
    await waitFor('the pipes let go', () => second.every((pipe) => !ours().has(pipe)), 10_000, 50);
    expect((await session('echo fresh')).stdout).toBe('fresh\n');
  });

  it('confines and stops the commands of containers it made from the host, inspecting none of them again', async () => {
    // A client of its own whose container inspects are counted.
    const counted = createDockerClient();
    let inspects = 0;
    const dial = counted.modem.dial.bind(counted.modem);
    counted.modem.dial = (options, callback) => {
      if (options.method === 'GET' && /^\/containers\/[^/]+\/json/.test(options.path ?? '')) inspects += 1;
      return dial(options, callback);
    };
    const own = new DockerProvider(counted, testContext());
    expect(own.capabilities.timeoutKill).toBe('cgroup');
    const ids: string[] = [];
    const exec = (id: string, command: string, timeoutMs = 20_000) =>
      own.exec(id, parseOrThrow(ExecRequestSchema, { command, timeoutMs }, 'exec'));
    try {
      // The first container's cgroup is found through the engine, which shows where it keeps them.
      const first = await own.create(spec());
      ids.push(first.id);
      expect((await exec(first.id, 'true')).exitCode).toBe(0);
      const second = await own.create(spec());
      ids.push(second.id);
      inspects = 0;
      // A timeout still kills all the command started: its cgroup was found on the host.
      expect((await exec(second.id, 'sleep 60 & sleep 60', 500)).status).toBe('timeout');
      expect((await exec(second.id, 'ps -o comm | grep -c sleep; true')).stdout.trim()).toBe('0');
      // And stopping the processes uses what the lookup saw: the keeper stays, the rest goes.
      await exec(second.id, 'sleep 60 >/dev/null 2>&1 &');
      expect(await own.stopProcesses(second.id)).toEqual({ killed: 1 });
      expect(await own.stopProcesses(first.id)).toEqual({ killed: 0 });
      expect((await exec(second.id, 'cat /proc/1/comm')).stdout.trim()).toBe('.gym-exec');
      expect(inspects).toBe(0);
    } finally {
      await Promise.all(ids.map((id) => own.destroy(id)));
      await own.close();
    }
  });

  it('validates its own providerOptions', async () => {
    const error = await provider
      .create(spec({ providerOptions: { capAdd: ['not valid'] } }))
      .catch((caught: unknown) => caught);
    expect(error).toMatchObject({ code: 'VALIDATION_FAILED' });
    expect((error as Error).message).toContain('capAdd');
  });

  // A hostile dataset's RUN step (a Harbor Dockerfile, a task's setup command) runs in a build
  // container: without limits it could fork without end or take the host's memory.
  it('builds images under cpu, memory and pids limits: a fork loop or a memory hog fails the build and leaves nothing', async () => {
    // Unconfigured, builds get what a sandbox gets by default.
    expect(DEFAULT_BUILD_RESOURCES).toEqual(DEFAULT_RESOURCES);
    const limited = new DockerProvider(docker, testContext(), {
      buildResources: { cpus: 0.5, memoryMiB: 64, pidsLimit: 64 },
    });
    const reference = `gym-test/build-limits-${context.daemonId}:hostile`;
    const plan = (script: string) =>
      limited.prepareImage({
        format: 'plan',
        reference,
        base: busybox,
        steps: [{ kind: 'run', argv: ['sh', '-c', script], env: {} }],
        settings: { env: {}, labels: {} },
        timeoutSeconds: 60,
      });
    try {
      const forks = (await plan(
        'i=0; while [ $i -lt 300 ]; do sleep 20 </dev/null >/dev/null 2>&1 & i=$((i+1)); done',
      ).catch((caught: unknown) => caught)) as GymError;
      expect(forks).toBeInstanceOf(GymError);
      expect(forks.code).toBe('VALIDATION_FAILED');
      expect(forks.message).toMatch(/can't fork/);
      expect(forks.message).toContain('64 processes');
      expect(await buildLeftovers(reference)).toBe(0);
      const hog = (await plan('x=$(head -c 300m /dev/zero | tr "\\0" a); echo ${#x}').catch(
        (caught: unknown) => caught,
      )) as GymError;
      expect(hog).toBeInstanceOf(GymError);
      expect(hog.code).toBe('VALIDATION_FAILED');
      expect(hog.message).toContain("ran out of the build's 64 MiB of memory");
      expect(hog.details).toMatchObject({ reason: 'oom' });
      expect(await buildLeftovers(reference)).toBe(0);
      expect(await limited.inspectImage(reference)).toBeNull();
    } finally {
      await docker
        .getImage(reference)
        .remove({ force: true })
        .catch(() => {});
      await limited.close();
    }
  });

  // A daemon killed between creating a build container and starting it leaves one that
  // auto-remove never removes; one whose keeper (the dataset's own `sleep`) never ends likewise.
  it("lists a sandbox once, not a container that only carries its labels (one of the sandbox's snapshot)", async () => {
    const sandbox = await provider.create(spec());
    const inspected = await docker.getContainer(provider.containerName(sandbox.id)).inspect();
    const lookalike = await docker.createContainer({
      name: `gym-test-lookalike-${randomBytes(6).toString('hex')}`,
      Image: busybox,
      Cmd: ['sleep', '600'],
      HostConfig: { NetworkMode: 'none' },
      Labels: inspected.Config.Labels,
    });
    try {
      const listed = (await provider.list()).sandboxes.filter((info) => info.id === sandbox.id);
      expect(listed.map((info) => info.providerRef)).toEqual([inspected.Id]);
    } finally {
      await lookalike.remove({ force: true }).catch(() => {});
      await provider.destroy(sandbox.id);
    }
  });

  it("removes build containers past their deadline at start, and keeps another build's and whatever only inherited a build's labels", async () => {
    const reference = `gym-test/build-sweep-${context.daemonId}:left`;
    const leftover = (deadlineAt: number, name: string) =>
      docker.createContainer({
        name,
        Image: busybox,
        Cmd: ['sleep', '600'],
        HostConfig: { NetworkMode: 'none' },
        Labels: { [BUILD_LABEL]: reference, [BUILD_DEADLINE_LABEL]: String(deadlineAt) },
      });
    const buildName = () => `gym.image-build.${randomBytes(8).toString('hex')}`;
    const stale = await leftover(Date.now() - 1000, buildName());
    const live = await leftover(Date.now() + 600_000, buildName());
    // A sandbox (or a user's container) of a built image carries the build's labels, as a commit
    // copies them into the image: it is no build container, whatever its deadline label says.
    const inherited = await leftover(Date.now() - 1000, `gym-test-${randomBytes(6).toString('hex')}`);
    await live.start();
    // A sandbox of an image built here: it inherits the build container's labels (docker commit
    // keeps them), deadline long past. Seen: any daemon's start removed such live sandboxes.
    const sandbox = await docker.createContainer({
      Image: busybox,
      Cmd: ['sleep', '600'],
      HostConfig: { NetworkMode: 'none' },
      Labels: {
        [BUILD_LABEL]: reference,
        [BUILD_DEADLINE_LABEL]: String(Date.now() - 1000),
        'gym.namespace': `sweep-${context.daemonId}`,
      },
    });
    await sandbox.start();
    await inherited.start();
    try {
      const started = await createDockerProvider({}, testContext());
      await started.close();
      const left = await docker.listContainers({
        all: true,
        filters: { label: [`${BUILD_LABEL}=${reference}`] },
      });
      expect(left.map((container) => container.Id).sort()).toEqual(
        [live.id, inherited.id, sandbox.id].sort(),
      );
    } finally {
      await Promise.all(
        [stale, live, inherited, sandbox].map((container) =>
          container.remove({ force: true }).catch(() => {}),
        ),
      );
    }
  });

  it('reports an unreachable engine as PROVIDER_UNAVAILABLE, never with the engine status', async () => {
    const unreachable = new DockerProvider(
      createDockerClient({ socketPath: '/nonexistent/docker.sock' }),
      testContext(),
    );
    const health = await unreachable.health();
    expect(health.ok).toBe(false);
    expect(health.message).toMatch(/cannot be reached/);
    const error = (await unreachable.create(spec()).catch((caught: unknown) => caught)) as GymError;
    expect(error).toBeInstanceOf(GymError);
    expect(error.code).toBe('PROVIDER_UNAVAILABLE');
    expect(error.httpStatus).toBe(503);
  });
});

// Under gVisor the host sees none of the guest's processes: the keeper stops them from inside.
const gvisor = skipReason === undefined ? await dockerTier('runsc') : undefined;
describe.skipIf((skipReason ?? gvisor?.skipReason) !== undefined)('docker provider under gVisor', () => {
  it('stops every process but the keeper from inside the guest, a setsid one included', {
    timeout: 90_000,
  }, async () => {
    const provider = new DockerProvider(gvisor!.docker, testContext(), gvisor!.providerOptions);
    const info = await provider.create(parseOrThrow(SandboxSpecSchema, { image: busybox }, 'spec'));
    try {
      const container = gvisor!.docker.getContainer(provider.containerName(info.id));
      const started = await provider.exec(
        info.id,
        parseOrThrow(ExecRequestSchema, { command: 'sleep 1001 & env -i setsid sleep 1002 & true' }, 'exec'),
      );
      expect(started.status).toBe('ok');
      expect((await guestCommandLines(container, EXEC_HELPER_MOUNT)).join('\n')).toMatch(/sleep 1002/);
      const { killed } = await provider.stopProcesses(info.id);
      expect(killed).toBeGreaterThanOrEqual(2);
      expect(await guestCommandLines(container, EXEC_HELPER_MOUNT)).toEqual([]);
      expect(
        (await provider.exec(info.id, parseOrThrow(ExecRequestSchema, { argv: ['echo', 'after'] }, 'exec')))
          .stdout,
      ).toBe('after\n');
    } finally {
      await provider.destroy(info.id);
      await provider.close();
    }
  });
});
