/**
 * The daemon with only the Kubernetes provider against the real test cluster of scripts/k8s/
 * (in CI, where .ci/run starts it; by hand: GYM_TEST_K8S_KUBECONFIG=$(scripts/k8s/up.sh); see
 * test/k8s-cluster/cluster.ts):
 * `gym eval run` scores all of swe-mini as on Docker, a warm pool keeps its Pods, and a fork by
 * archive gives children equal to the parent. Images go to the node from the local engine.
 *
 * Every sandbox requests a quarter of its limits (`requestFraction`): at the daemon's default of
 * 2 cpus each, requested in full, a 2-core node holds one Pod at a time. `imagePullPolicy:
 * IfNotPresent`, since the node has its images from the engine and no registry.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { CoreV1Api, Exec } from '@kubernetes/client-node';
import { describe, expect, it } from 'vitest';
import { buildSweMiniImages } from '../../cli/task-images.ts';
import { GymClient } from '../../client/client.ts';
import { loadEnvironment, readRows } from '../../environments/environment.ts';
import { readJsonl } from '../../environments/runner/files.ts';
import { gymFields } from '../../environments/runner/rollout-line.ts';
import { ModelScriptSchema } from '../../harnesses/scripted-model/script.ts';
import { startScriptedModelServer } from '../../harnesses/scripted-model/server.ts';
import { spawnDaemonProcess, startTestDaemon } from '../../test/daemon-harness.ts';
import { dockerTestEnvironment, localImages, testImage } from '../../test/docker-available.ts';
import { clusterTestEnvironment, importImages, kubeConfigOf } from '../../test/k8s-cluster/cluster.ts';
import { SANDBOX_CONTAINER } from './kubernetes-provider.ts';

const cluster = await clusterTestEnvironment();
const { docker } = await dockerTestEnvironment();
const core = kubeConfigOf(cluster).makeApiClient(CoreV1Api);
const CLI = new URL('../../cli/main.ts', import.meta.url).pathname;
const providerOptions = {
  kubeconfigPath: cluster.kubeconfigPath,
  requestFraction: 0.25,
  imagePullPolicy: 'IfNotPresent',
};

/** A daemon's configuration file with only this provider (and `extra` lines). */
async function daemonConfig(stateDir: string, namespace: string, extra: string[] = []): Promise<string> {
  const configPath = join(stateDir, 'gym.yaml');
  await writeFile(
    configPath,
    [
      `stateDir: ${stateDir}`,
      `namespace: ${namespace}`,
      'listen: { host: 127.0.0.1, port: 0 }',
      'logLevel: warn',
      'providers:',
      '  - name: kubernetes',
      `    options: ${JSON.stringify(providerOptions)}`,
      ...extra,
      '',
    ].join('\n'),
  );
  return configPath;
}

/** A command in a Pod straight through the API (what the agent inside does, with no daemon at all). */
function inPod(pod: string, command: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const stdout = new PassThrough();
    stdout.on('data', (chunk: Buffer) => chunks.push(chunk));
    new Exec(kubeConfigOf(cluster))
      .exec(
        cluster.namespace,
        pod,
        SANDBOX_CONTAINER,
        ['sh', '-c', command],
        stdout,
        stdout,
        null,
        false,
        () => resolve(Buffer.concat(chunks).toString().trim()),
      )
      .catch(reject);
  });
}

const podsOf = async (labelSelector: string) =>
  (await core.listNamespacedPod({ namespace: cluster.namespace, labelSelector })).items.length;

describe('the daemon on the kubernetes provider (a real cluster)', () => {
  it('gym eval run scores all of swe-mini as on Docker: oracle 1, no-op 0, nothing left', async () => {
    const images: string[] = [];
    await buildSweMiniImages(localImages(docker), (reference) => images.push(reference));
    await importImages(...images);
    const namespace = `k8seval-${randomBytes(3).toString('hex')}`;
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-k8s-eval-'));
    const configPath = join(stateDir, 'gym.yaml');
    await writeFile(
      configPath,
      [
        `stateDir: ${stateDir}`,
        `namespace: ${namespace}`,
        'listen: { host: 127.0.0.1, port: 0 }',
        'logLevel: warn',
        'providers:',
        '  - name: kubernetes',
        `    options: ${JSON.stringify(providerOptions)}`,
        '',
      ].join('\n'),
    );
    const rows = await readRows((await loadEnvironment('swe-mini')).dataPath);
    let child: ChildProcess | undefined;
    try {
      child = (await spawnDaemonProcess(configPath, stateDir)).child;
      for (const [harness, expected] of [
        ['oracle', 1],
        ['noop', 0],
      ] as const) {
        const output = join(stateDir, `${harness}.jsonl`);
        const run = await gym(
          [
            'eval',
            'run',
            '--env',
            'swe-mini',
            '--harness',
            harness,
            '--concurrency',
            '3',
            '--output',
            output,
          ],
          stateDir,
        );
        expect(run.code, run.stderr).toBe(0);
        const rollouts = await readJsonl(output);
        const why = rollouts
          .filter((row) => row.reward !== expected)
          .map((row) => JSON.stringify({ id: row.instance_id, gym: gymFields(row) }).slice(0, 4000));
        expect(
          rollouts
            .map((row) => [row.instance_id, row.reward, gymFields(row).outcome])
            .sort((a, b) => String(a[0]).localeCompare(String(b[0]))),
          why.join('\n'),
        ).toEqual(
          rows
            .map((row) => [row.instance_id, expected, 'reward'])
            .sort((a, b) => String(a[0]).localeCompare(String(b[0]))),
        );
      }
      const left = await gym(['sandbox', 'ls', '--json'], stateDir);
      expect(JSON.parse(left.stdout)).toEqual([]);
    } finally {
      child?.kill('SIGTERM');
      await new Promise((resolve) =>
        child?.exitCode === null ? child.once('exit', resolve) : resolve(null),
      );
      await rm(stateDir, { recursive: true, force: true });
    }
    await expect.poll(() => podsOf(`gym.namespace=${namespace}`), { timeout: 60_000 }).toBe(0);
  }, 900_000);

  it('keeps a warm pool of Pods, labelled with the pool, and hands one out warm', async () => {
    const busybox = await testImage(docker, 'busybox');
    await importImages(busybox);
    const namespace = `k8spool-${randomBytes(3).toString('hex')}`;
    const daemon = await startTestDaemon(
      { namespace, providers: [{ name: 'kubernetes', options: providerOptions }] },
      { listen: true },
    );
    try {
      const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
      await client.definePool('warm', { spec: { image: busybox, ttlSeconds: 600 }, minIdle: 2 });
      await expect.poll(async () => (await client.getPool('warm')).idle, { timeout: 60_000 }).toBe(2);
      expect(await podsOf(`gym.namespace=${namespace},gym.pool=warm`)).toBe(2);
      const sandbox = await client.createSandbox({ pool: 'warm' });
      expect((await client.exec(sandbox.id, { argv: ['echo', 'warm'] })).stdout).toBe('warm\n');
      expect((await client.getPool('warm')).hits).toBe(1);
      await client.destroySandbox(sandbox.id);
    } finally {
      await daemon.stop({ destroy: true });
    }
  }, 180_000);

  it('forks a Pod through the archive: children equal at fork time, apart, without the parent relay', async () => {
    const busybox = await testImage(docker, 'busybox');
    await importImages(busybox);
    const namespace = `k8sfork-${randomBytes(3).toString('hex')}`;
    const daemon = await startTestDaemon(
      { namespace, providers: [{ name: 'kubernetes', options: providerOptions }] },
      { listen: true },
    );
    try {
      const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
      const shell = async (id: string, command: string) => (await client.exec(id, { command })).stdout.trim();
      const parent = await client.createSandbox({ image: busybox, ttlSeconds: 600 });
      await client.exposeGateway(parent.id);
      await shell(
        parent.id,
        'mkdir -p /work && echo v1 > /work/state && ln -s /work/state /work/link && rm /etc/group',
      );
      expect(await shell(parent.id, 'test -e /tmp/.gym-relay && echo relay')).toBe('relay');
      const forked = await client.fork(parent.id, { count: 2 });
      expect(forked.snapshot).toMatchObject({ method: 'archive', provider: 'kubernetes' });
      const probe =
        'cat /work/link; test -e /etc/group && echo group-back || echo group-gone; test -e /tmp/.gym-relay && echo relay || echo no-relay';
      for (const child of forked.sandboxes)
        expect(await shell(child.id, probe)).toBe('v1\ngroup-gone\nno-relay');
      await shell(forked.sandboxes[0]!.id, 'echo c0 > /work/state');
      expect(await shell(forked.sandboxes[1]!.id, 'cat /work/state')).toBe('v1');
      expect(await shell(parent.id, 'cat /work/state')).toBe('v1');
    } finally {
      await daemon.stop({ destroy: true });
    }
  }, 180_000);
});

/** Runs the `gym` CLI against the daemon of `stateDir`. */
function gym(
  args: string[],
  stateDir: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, ...args], {
      env: { ...process.env, GYM_STATE_DIR: stateDir, GYM_LOG_LEVEL: 'warn' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk: Buffer) => {
      stdout += chunk.toString();
    });
    child.stderr.on('data', (chunk: Buffer) => {
      stderr += chunk.toString();
    });
    child.on('close', (code) => resolve({ code, stdout, stderr }));
  });
}

describe('the daemon on the kubernetes provider (a real cluster): the gateway relay', () => {
  it('leaves no relay running after kill -9; its successor adopts the Pod and restores the same URL', async () => {
    const busybox = await testImage(docker, 'busybox');
    await importImages(busybox);
    const namespace = `k8scrash-${randomBytes(3).toString('hex')}`;
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-k8s-crash-'));
    const configPath = await daemonConfig(stateDir, namespace);
    let child: ChildProcess | undefined;
    try {
      const started = await spawnDaemonProcess(configPath, stateDir);
      child = started.child;
      const sandbox = await started.client.createSandbox({ image: busybox, ttlSeconds: 600 });
      const { url } = await started.client.exposeGateway(sandbox.id);
      const pod = `gym-${namespace}-${sandbox.id}`;
      const ask = () =>
        inPod(
          pod,
          `printf 'GET /v1/models HTTP/1.0\\r\\n\\r\\n' | nc 127.0.0.1 ${new URL(url).port} 2>&1 | head -1; echo " exit $?"`,
        );
      // The gateway's status line (any status: the route needs a rollout).
      const answered = /^HTTP\/1\.1 \d{3}/;
      const first = await ask();
      expect(first, first).toMatch(answered);
      const relays = () =>
        inPod(
          pod,
          'for p in /proc/[0-9]*; do case "$(tr "\\0" " " < $p/cmdline 2>/dev/null)" in /tmp/.gym-relay*) echo $p;; esac; done | wc -l',
        );
      expect(Number(await relays())).toBeGreaterThan(0);
      child.kill('SIGKILL');
      await new Promise((resolve) => child!.once('exit', resolve));
      // The stream dropped with the daemon: the relay's stdin ended and it exited.
      await expect.poll(async () => Number(await relays()), { timeout: 10_000 }).toBe(0);
      expect(await ask()).not.toMatch(answered);
      const restarted = await spawnDaemonProcess(configPath, stateDir);
      child = restarted.child;
      expect((await restarted.client.getSandbox(sandbox.id)).state).toBe('ready');
      expect(await restarted.client.exposeGateway(sandbox.id)).toEqual({ url });
      const last = await ask();
      expect(last, last).toMatch(answered);
      await restarted.client.destroySandbox(sandbox.id);
    } finally {
      child?.kill('SIGKILL');
      await rm(stateDir, { recursive: true, force: true });
    }
  }, 180_000);

  it('runs the mini-swe harness with the scripted model through the gateway relay: reward 1', async () => {
    // The terminal tasks name `gym/debian-base`, i.e. `:latest`, which a kubelet pulls again each
    // time unless told otherwise (Kubernetes' default policy): preloaded, it needs
    // `imagePullPolicy: IfNotPresent`, as docs/providers/kubernetes.md says.
    await importImages(await testImage(docker, 'debian-base'), 'gym/debian-base:latest');
    const model = await startScriptedModelServer(
      ModelScriptSchema.parse({
        conversations: [
          {
            match: 'ERROR',
            replies: [
              { content: 'Count them.\n```bash\ngrep -c ERROR /app/server.log > /app/error_count.txt\n```' },
              { content: 'Done.\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```' },
            ],
          },
        ],
      }),
    );
    const stateDir = await mkdtemp(join(tmpdir(), 'gym-k8s-miniswe-'));
    const configPath = await daemonConfig(stateDir, `k8sswe-${randomBytes(3).toString('hex')}`, [
      `gateway: { upstream: { baseUrl: ${model.baseUrl} }, maxRetries: 0 }`,
    ]);
    let child: ChildProcess | undefined;
    try {
      child = (await spawnDaemonProcess(configPath, stateDir)).child;
      const input = join(stateDir, 'one-task.jsonl');
      const rows = (
        await readFile(new URL('../../environments/terminal/data/example.jsonl', import.meta.url), 'utf8')
      )
        .split('\n')
        .filter((line) => line.includes('"count-errors"'));
      await writeFile(input, `${rows.join('\n')}\n`);
      const output = join(stateDir, 'mini-swe.jsonl');
      const run = await gym(
        ['eval', 'run', '--env', 'terminal', '--input', input, '--harness', 'mini-swe', '--output', output],
        stateDir,
      );
      expect(run.code, run.stderr).toBe(0);
      const [rollout] = await readJsonl(output);
      expect(rollout).toMatchObject({ id: 'count-errors', _gym: { outcome: 'reward' }, reward: 1 });
      expect((gymFields(rollout!).model_calls as unknown[]).length).toBe(2);
    } finally {
      child?.kill('SIGTERM');
      await new Promise((resolve) =>
        child?.exitCode === null ? child.once('exit', resolve) : resolve(null),
      );
      await model.close();
      await rm(stateDir, { recursive: true, force: true });
    }
  }, 300_000);
});
