/**
 * The Kubernetes provider through the test-only API emulator (`test/k8s-emulator/`), with the
 * unmodified client-node over real HTTP and WebSocket: the provider contract, and what is
 * particular to Pods (their manifest, the NetworkPolicy that health() checks, a Pod deleted
 * behind the daemon's back).
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CoreV1Api, KubeConfig, NetworkingV1Api } from '@kubernetes/client-node';
import { afterAll, describe, expect, it } from 'vitest';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { parseOrThrow } from '../../core/validate.ts';
import { dockerTestEnvironment, testImage } from '../../test/docker-available.ts';
import { testContext } from '../../test/fixtures/provider-context.ts';
import { runStopperAttack } from '../../test/fixtures/stopper-attack.ts';
import { KubernetesEmulator } from '../../test/k8s-emulator/emulator.ts';
import { relayBinaryForTests } from '../../test/relay-binary.ts';
import { describeSandboxProviderContract } from '../contract/index.ts';
import { type ContractEntry, entriesToTar } from '../contract/tar-helpers.ts';
import { createKubernetesProvider, KubernetesProvider } from './index.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';
const NAMESPACE = 'gym-test';

const emulator = skipReason === undefined ? await KubernetesEmulator.start(docker) : null;
const directory = await mkdtemp(join(tmpdir(), 'gym-k8s-'));
const kubeconfigPath = join(directory, 'kubeconfig');
const unreachablePath = join(directory, 'unreachable');
if (emulator !== null) {
  await writeFile(kubeconfigPath, emulator.kubeconfig(NAMESPACE), { mode: 0o600 });
  // The same cluster entry on a port nobody listens on.
  await writeFile(
    unreachablePath,
    emulator.kubeconfig(NAMESPACE).replace(emulator.url, 'http://127.0.0.1:9'),
  );
}

// A relay as new as its source (the port cases need its connect mode).
const makeProvider = async () =>
  (await createKubernetesProvider(
    { kubeconfigPath, relayHelperPath: relayBinaryForTests() },
    testContext(),
  )) as KubernetesProvider;

afterAll(async () => {
  await emulator?.close();
  await rm(directory, { recursive: true, force: true });
});

describeSandboxProviderContract({
  name: 'kubernetes through the emulator (busybox)',
  image: busybox,
  capabilities: {
    sessions: true,
    snapshot: false,
    gatewayReach: true,
    timeoutKill: 'tagged',
    pidsLimit: false,
  },
  createProvider: makeProvider,
  createUnreachableProvider: () =>
    createKubernetesProvider({ kubeconfigPath: unreachablePath }, testContext()),
  ...(skipReason === undefined ? {} : { skipReason }),
});

describe.skipIf(skipReason !== undefined)('kubernetes provider specifics', () => {
  const context = testContext({ namespace: 'specifics' });
  const kubeConfig = new KubeConfig();
  if (emulator !== null) kubeConfig.loadFromString(emulator.kubeconfig(NAMESPACE));
  const core = kubeConfig.makeApiClient(CoreV1Api);
  const networking = kubeConfig.makeApiClient(NetworkingV1Api);
  const provider = new KubernetesProvider(kubeConfig, context);
  const created: string[] = [];
  const spec = (overrides: Record<string, unknown> = {}) =>
    parseOrThrow(SandboxSpecSchema, { image: busybox, ...overrides }, 'spec');

  afterAll(async () => {
    await Promise.all(created.map((id) => provider.destroy(id)));
    await provider.close();
  });

  it('makes a locked-down Pod: identity in labels, no token, seccomp, dropped capabilities, the deadline', async () => {
    const info = await provider.create(
      spec({ labels: { task: 't1' }, resources: { cpus: 0.5, memoryMiB: 96, diskMiB: 512 } }),
      {
        pool: 'p1',
      },
    );
    created.push(info.id);
    const pod = await core.readNamespacedPod({ name: provider.podName(info.id), namespace: NAMESPACE });
    expect(pod.metadata?.labels).toMatchObject({
      'gym.namespace': 'specifics',
      'gym.daemon-id': context.daemonId,
      'gym.sandbox-id': info.id,
      'gym.pool': 'p1',
      'gym.user.task': 't1',
    });
    expect(pod.spec).toMatchObject({
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      restartPolicy: 'Never',
      activeDeadlineSeconds: context.maxLifetimeSeconds,
      securityContext: { seccompProfile: { type: 'RuntimeDefault' } },
    });
    const container = pod.spec?.containers[0];
    expect(container?.securityContext).toMatchObject({
      allowPrivilegeEscalation: false,
      privileged: false,
      capabilities: { drop: ['ALL'] },
    });
    expect(container?.resources?.limits).toEqual({
      cpu: '500m',
      memory: '96Mi',
      'ephemeral-storage': '512Mi',
    });
    expect(container?.resources?.requests).toEqual({ cpu: '500m', memory: '96Mi' });
    // In the running sandbox: no privilege gain, only the default capabilities.
    const status = await provider.exec(
      info.id,
      parseOrThrow(
        ExecRequestSchema,
        { command: 'grep -E "^(CapEff|NoNewPrivs)" /proc/self/status' },
        'exec',
      ),
    );
    expect(status.stdout).toMatch(/NoNewPrivs:\s*1/);
    const capEff = BigInt(`0x${/CapEff:\s*([0-9a-f]+)/.exec(status.stdout)?.[1]}`);
    const allowed = [0, 1, 3, 4, 5, 6, 7].reduce((mask, bit) => mask | (1n << BigInt(bit)), 0n);
    expect(capEff & ~allowed).toBe(0n);
  });

  it('creates one deny-all NetworkPolicy for its Pods, and health() fails when it is gone', async () => {
    expect((await provider.health()).ok).toBe(true);
    const policy = await networking.readNamespacedNetworkPolicy({
      name: provider.policyName,
      namespace: NAMESPACE,
    });
    expect(policy.spec).toMatchObject({
      podSelector: { matchLabels: { 'gym.namespace': 'specifics' } },
      policyTypes: ['Ingress', 'Egress'],
    });
    expect(policy.spec?.ingress ?? []).toEqual([]);
    expect(policy.spec?.egress ?? []).toEqual([]);
    await networking.deleteNamespacedNetworkPolicy({ name: provider.policyName, namespace: NAMESPACE });
    const health = await provider.health();
    expect(health.ok).toBe(false);
    expect(health.message).toMatch(/NetworkPolicy .* is missing/);
  });

  it('reports sandbox_gone for a command whose Pod is deleted behind its back', async () => {
    const info = await provider.create(spec());
    created.push(info.id);
    const running = provider.exec(
      info.id,
      parseOrThrow(ExecRequestSchema, { command: 'sleep 30', timeoutMs: 60_000 }, 'exec'),
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    await core.deleteNamespacedPod({
      name: provider.podName(info.id),
      namespace: NAMESPACE,
      gracePeriodSeconds: 0,
    });
    expect((await running).status).toBe('sandbox_gone');
    await expect(provider.get(info.id)).rejects.toMatchObject({ code: 'SANDBOX_NOT_FOUND' });
  });

  it('reports sandbox_gone for a command whose Pod is evicted, and the sandbox as failed', async () => {
    const info = await provider.create(spec());
    created.push(info.id);
    const running = provider.exec(
      info.id,
      parseOrThrow(ExecRequestSchema, { command: 'sleep 30', timeoutMs: 60_000 }, 'exec'),
    );
    await new Promise((resolve) => setTimeout(resolve, 300));
    await emulator!.evict(NAMESPACE, provider.podName(info.id));
    expect((await running).status).toBe('sandbox_gone');
    expect((await provider.get(info.id)).state).toBe('failed');
    expect(
      await provider.exec(info.id, parseOrThrow(ExecRequestSchema, { argv: ['true'] }, 'exec')),
    ).toMatchObject({
      status: 'sandbox_gone',
    });
  });

  it('reads a large file at the pace of its reader: the Pod waits, the daemon does not hold the file', async () => {
    const info = await provider.create(spec());
    created.push(info.id);
    const run = (command: string) =>
      provider.exec(info.id, parseOrThrow(ExecRequestSchema, { command }, 'exec'));
    const mebibytes = 32;
    await run(`dd if=/dev/zero of=/tmp/big bs=1048576 count=${mebibytes} 2>/dev/null`);
    const content = await provider.readFile(info.id, '/tmp/big');
    // A reader that takes nothing for a while: without backpressure the whole file would leave
    // the Pod into the daemon's memory meanwhile.
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    const progress = await run(
      'for p in /proc/[0-9]*; do if tr "\\0" " " < $p/cmdline 2>/dev/null | grep -q "^tar -c"; then grep ^wchar $p/io; fi; done',
    );
    // What the Pod's tar has written so far: held in pipes, the kernel's socket buffers (a few
    // MiB on loopback) and the daemon's buffers. The tar is still running, blocked.
    const written = Number(/wchar:\s*(\d+)/.exec(progress.stdout)?.[1]);
    expect(written).toBeGreaterThan(0);
    expect(written).toBeLessThan(16 * 1024 * 1024);
    let total = 0;
    for await (const chunk of content) total += (chunk as Buffer).length;
    expect(total).toBe(mebibytes * 1024 * 1024);
  });

  it('stops every process but the keeper, whatever it does, and the sandbox stays usable', async () => {
    const info = await provider.create(spec());
    created.push(info.id);
    const run = (command: string, timeoutMs = 10_000) =>
      provider.exec(info.id, parseOrThrow(ExecRequestSchema, { command, timeoutMs }, 'exec'));
    // Background processes that left their group, one that respawns, one that cleared its environment.
    await run(
      'setsid sleep 1001 >/dev/null 2>&1 & (while :; do sleep 1002; done) >/dev/null 2>&1 & env -i sleep 1003 >/dev/null 2>&1 & true',
    );
    const before = await run(
      'for p in /proc/[0-9]*; do tr "\\0" " " < $p/cmdline; echo; done | grep -c "^sleep 100"',
    );
    expect(Number(before.stdout)).toBeGreaterThanOrEqual(3);
    // The keeper's idle sleep: a child of PID 1 in its session (the agent's orphans have sessions of their own).
    const keeperSleep =
      'for p in /proc/[0-9]*; do read -r s < $p/stat; set -- ${s##*) }; [ "$2 $4" = "1 1" ] && echo "${p#/proc/} $1"; done';
    const [sleepPid] = (await run(keeperSleep)).stdout.trim().split(' ');
    expect(Number(sleepPid)).toBeGreaterThan(1);
    const { killed } = await provider.stopProcesses(info.id);
    expect(killed).toBeGreaterThanOrEqual(4);
    // Left stopped, not killed: killed, the keeper would start another sleep, which the script
    // could find pass after pass under load (and fail).
    expect((await run(keeperSleep)).stdout).toBe(`${sleepPid} T\n`);
    const after = await run(
      'for p in /proc/[0-9]*; do tr "\\0" " " < $p/cmdline; echo; done | grep -c "^sleep 100"',
    );
    expect(after.stdout.trim()).toBe('0');
    expect((await run('echo alive')).stdout).toBe('alive\n');
  });

  it('leaves nothing of a timed-out command that stops the kill script: the Pod is killed, the command lost its sandbox', {
    timeout: 90_000,
  }, async () => {
    // One-shot and through a session at once: the two paths of a timeout kill.
    await Promise.all(
      [undefined, 'agent'].map(async (session) => {
        const info = await provider.create(spec());
        created.push(info.id);
        const container = docker.getContainer(emulator!.containerOf(NAMESPACE, provider.podName(info.id))!);
        // The loop stops the kill script as it starts, so the Pod has to go.
        if ((await runStopperAttack(provider, info.id, container, session)) !== 'lost') return;
        await expect(provider.get(info.id)).rejects.toMatchObject({ code: 'SANDBOX_NOT_FOUND' });
      }),
    );
  });

  it('deletes the Pod when a stopper left running resists stop-processes: the sandbox lost, never an error', {
    timeout: 90_000,
  }, async () => {
    const info = await provider.create(spec());
    created.push(info.id);
    // Left by an earlier command: stops every process of the Pod started after it, the stop
    // script too. Not the processes of the exec that starts it (older): stopping those raced
    // that exec's own end, which a loaded host lost (the exec timed out).
    const left = await provider.exec(
      info.id,
      parseOrThrow(
        ExecRequestSchema,
        {
          command: `sh -c 'while :; do for p in /proc/[0-9]*; do [ "\${p#/proc/}" -gt "$$" ] && kill -STOP "\${p#/proc/}" 2>/dev/null; done; done' >/dev/null 2>&1 &`,
        },
        'exec',
      ),
    );
    expect(left.status).toBe('ok');
    const stopped = await provider.stopProcesses!(info.id);
    expect(stopped).toMatchObject({ killed: 0, sandboxLost: true });
    expect(stopped.reason).toMatch(/resisted being stopped/);
    await expect(provider.get(info.id)).rejects.toMatchObject({ code: 'SANDBOX_NOT_FOUND' });
  });

  it('fails a create whose Pod cannot be scheduled at the create deadline, with the reason, leaving no Pod', async () => {
    const gpuProvider = new KubernetesProvider(kubeConfig, testContext({ namespace: 'nogpu' }), {
      gpus: true,
      createTimeoutMs: 1_500,
    });
    try {
      const error = await gpuProvider.create(spec({ resources: { gpus: 1 } })).then(
        () => null,
        (caught: unknown) => caught,
      );
      expect(error).toMatchObject({
        code: 'SANDBOX_START_FAILED',
        message: expect.stringContaining('Insufficient nvidia.com/gpu'),
        details: { reason: 'Unschedulable' },
      });
      const left = await core.listNamespacedPod({
        namespace: NAMESPACE,
        labelSelector: 'gym.namespace=nogpu',
      });
      expect(left.items).toEqual([]);
    } finally {
      await gpuProvider.close();
    }
  });

  it('waits out an Unschedulable Pod until a node that fits it joins (a cluster autoscaler)', async () => {
    const gpuProvider = new KubernetesProvider(kubeConfig, testContext({ namespace: 'autoscaled' }), {
      gpus: true,
      createTimeoutMs: 60_000,
    });
    try {
      const creating = gpuProvider.create(spec({ resources: { gpus: 1 } }));
      const outcome = creating.then(
        () => 'created',
        () => 'failed',
      );
      // The Pod is seen Unschedulable first, and the create is still waiting then.
      let unschedulable = false;
      for (let tries = 0; tries < 100 && !unschedulable; tries++) {
        await new Promise((resolve) => setTimeout(resolve, 100));
        const pods = await core.listNamespacedPod({
          namespace: NAMESPACE,
          labelSelector: 'gym.namespace=autoscaled',
        });
        unschedulable =
          pods.items[0]?.status?.conditions?.some((condition) => condition.reason === 'Unschedulable') ===
          true;
      }
      expect(unschedulable).toBe(true);
      // Two more of the provider's polls, so a create that gives up on Unschedulable would have.
      await new Promise((resolve) => setTimeout(resolve, 1_200));
      expect(await Promise.race([outcome, Promise.resolve('pending')])).toBe('pending');
      await emulator!.addGpuNode(1);
      const info = await creating;
      expect(info.state).toBe('ready');
      const echo = await gpuProvider.exec(
        info.id,
        parseOrThrow(ExecRequestSchema, { argv: ['echo', 'up'] }, 'exec'),
      );
      expect(echo.stdout).toBe('up\n');
      await gpuProvider.destroy(info.id);
    } finally {
      await gpuProvider.close();
    }
  });

  it('takes a numeric user only, and refuses spec options it does not know', async () => {
    await expect(provider.create(spec({ user: 'nobody' }))).rejects.toMatchObject({
      code: 'VALIDATION_FAILED',
    });
    await expect(provider.create(spec({ providerOptions: { hostPID: true } }))).rejects.toMatchObject({
      code: 'VALIDATION_FAILED',
    });
    await expect(provider.create(spec({ resources: { gpus: 1 } }))).rejects.toMatchObject({
      code: 'CAPABILITY_UNSUPPORTED',
    });
    const info = await provider.create(spec({ user: '65534:65534' }));
    created.push(info.id);
    const id = await provider.exec(
      info.id,
      parseOrThrow(ExecRequestSchema, { command: 'id -u; id -g' }, 'exec'),
    );
    expect(id.stdout).toBe('65534\n65534\n');
  });
});

describe.skipIf(skipReason !== undefined)('kubernetes provider: an archive of many directories', () => {
  it('checks every directory for planted links, over several execs, before it extracts', async () => {
    const provider = await makeProvider();
    const info = await provider.create(parseOrThrow(SandboxSpecSchema, { image: busybox }, 'spec'));
    try {
      const entries: ContractEntry[] = [];
      for (let index = 0; index < 450; index++) entries.push({ name: `d${index}`, type: 'directory' });
      entries.push({ name: 'd449/last.txt', type: 'file', content: Buffer.from('last') });
      await provider.writeArchive(info.id, '/srv/many', entriesToTar(entries));
      const run = (command: string) =>
        provider.exec(info.id, parseOrThrow(ExecRequestSchema, { command }, 'exec'));
      expect((await run('ls /srv/many | wc -l; cat /srv/many/d449/last.txt')).stdout).toBe('450\nlast');
      // A link planted where the first batch looks: refused, and nothing of the archive written.
      await run('rm -r /srv/many/d3 && ln -s /etc /srv/many/d3');
      const planted = [...entries, { name: 'd3/evil', type: 'file' as const, content: Buffer.from('x') }];
      await expect(provider.writeArchive(info.id, '/srv/many', entriesToTar(planted))).rejects.toMatchObject({
        code: 'PATH_KIND_MISMATCH',
      });
      expect((await run('ls /etc/evil 2>&1')).stdout).toMatch(/No such file/);
    } finally {
      await provider.destroy(info.id);
      await provider.close();
    }
  });
});

describe.skipIf(skipReason !== undefined)(
  'kubernetes provider on nodes whose OOM kill ends the whole container',
  () => {
    it('reports oom and the sandbox lost for the command, one-shot or in a session, then the sandbox as failed', async () => {
      // As a kubelet 1.28+ on cgroup v2 (memory.oom.group): the container terminates OOMKilled.
      const grouped = await KubernetesEmulator.start(docker, { oomKillsContainer: true });
      const kubeConfig = new KubeConfig();
      kubeConfig.loadFromString(grouped.kubeconfig(NAMESPACE));
      const core = kubeConfig.makeApiClient(CoreV1Api);
      const provider = new KubernetesProvider(kubeConfig, testContext({ namespace: 'oom-group' }));
      try {
        for (const session of [undefined, 'hog']) {
          const info = await provider.create(
            parseOrThrow(SandboxSpecSchema, { image: busybox, resources: { memoryMiB: 48 } }, 'spec'),
          );
          const run = (request: Record<string, unknown>) =>
            provider.exec(info.id, parseOrThrow(ExecRequestSchema, request, 'exec'));
          if (session !== undefined) expect((await run({ argv: ['true'], session })).status).toBe('ok');
          const result = await run({ command: 'tail /dev/zero', timeoutMs: 60_000, session });
          // The command's memory ended the Pod: its own loss, never the cluster's `sandbox_gone`.
          expect(result).toMatchObject({ status: 'oom', sandboxLost: true });
          const pod = await core.readNamespacedPod({ name: provider.podName(info.id), namespace: NAMESPACE });
          expect(pod.status?.containerStatuses?.[0]?.state?.terminated?.reason).toBe('OOMKilled');
          expect((await provider.get(info.id)).state).toBe('failed');
          expect(await run({ argv: ['true'] })).toMatchObject({ status: 'oom', sandboxLost: true });
          await provider.destroy(info.id);
        }
      } finally {
        await provider.close();
        await grouped.close();
      }
    });
  },
);

describe.skipIf(skipReason !== undefined)('kubernetes provider on a server without v5 (before 1.30)', () => {
  it('runs commands, stdin, sessions, uploads and seed files over v4, which cannot end stdin', async () => {
    const old = await KubernetesEmulator.start(docker, { protocols: ['v4.channel.k8s.io'] });
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromString(old.kubeconfig(NAMESPACE));
    const provider = new KubernetesProvider(kubeConfig, testContext({ namespace: 'old-server' }));
    try {
      // spec.files are uploads made during the create.
      const info = await provider.create(
        parseOrThrow(
          SandboxSpecSchema,
          { image: busybox, files: [{ path: '/srv/seed.txt', content: 'seeded' }] },
          'spec',
        ),
      );
      const run = (request: Record<string, unknown>) =>
        provider.exec(info.id, parseOrThrow(ExecRequestSchema, request, 'exec'));
      expect(await run({ command: 'echo out; exit 3' })).toMatchObject({
        status: 'ok',
        exitCode: 3,
        stdout: 'out\n',
      });
      // stdin reaches the command, which then reads end-of-file, and the exit status is kept.
      expect(await run({ command: 'cat; echo "|$(cat | wc -c)"; exit 4', stdin: 'kept' })).toMatchObject({
        status: 'ok',
        exitCode: 4,
        stdout: 'kept|0\n',
      });
      // A command that reads none of its stdin ends anyway.
      expect(await run({ argv: ['true'], stdin: 'x'.repeat(100_000) })).toMatchObject({
        status: 'ok',
        exitCode: 0,
      });
      // Sessions: the shell's stdin stays open between commands.
      for (const value of ['one', 'two']) {
        expect(await run({ command: `cat; echo " ${value}"`, stdin: value, session: 's' })).toMatchObject({
          status: 'ok',
          stdout: `${value} ${value}\n`,
        });
      }
      const binary = Buffer.from(Array.from({ length: 70_000 }, (_, index) => (index * 7) % 256));
      await provider.writeFile(info.id, '/srv/data.bin', binary);
      const read: Buffer[] = [];
      for await (const chunk of await provider.readFile(info.id, '/srv/data.bin')) read.push(chunk as Buffer);
      expect(Buffer.concat(read).equals(binary)).toBe(true);
      await provider.writeArchive(
        info.id,
        '/srv/tree',
        entriesToTar([{ name: 'a/b.txt', type: 'file', content: Buffer.from('tree') }]),
      );
      expect((await run({ command: 'cat /srv/seed.txt /srv/tree/a/b.txt' })).stdout).toBe('seededtree');
      expect(old.stats.execs['v4.channel.k8s.io']).toBeGreaterThan(0);
      expect(old.stats.execs['v5.channel.k8s.io']).toBeUndefined();
      await provider.destroy(info.id);
    } finally {
      await provider.close();
      await old.close();
    }
  });
});
