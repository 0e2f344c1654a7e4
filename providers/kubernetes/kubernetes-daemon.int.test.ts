/**
 * The daemon with only the Kubernetes provider, through the test-only API emulator: `gym eval
 * run` (the CLI) scores all of swe-mini as on Docker, and a daemon killed with -9 leaves no relay in its Pods and its successor
 * adopts them, restoring gateway reach at the same URL.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildSweMiniImages } from '../../cli/task-images.ts';
import { GymClient } from '../../client/client.ts';
import { loadEnvironment, readRows } from '../../environments/environment.ts';
import { readJsonl } from '../../environments/runner/files.ts';
import { gymFields } from '../../environments/runner/rollout-line.ts';
import { ModelScriptSchema } from '../../harnesses/scripted-model/script.ts';
import { startScriptedModelServer } from '../../harnesses/scripted-model/server.ts';
import { spawnDaemonProcess, startTestDaemon } from '../../test/daemon-harness.ts';
import { dockerTestEnvironment, localImages, testImage } from '../../test/docker-available.ts';
import { expectServedPage, httpdServiceSpec } from '../../test/httpd-service.ts';
import { KubernetesEmulator } from '../../test/k8s-emulator/emulator.ts';
import { relayBinaryForTests } from '../../test/relay-binary.ts';
import { DockerStreamDemuxer } from '../docker/demux.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const NAMESPACE = 'gym-daemon-test';
const CLI = new URL('../../cli/main.ts', import.meta.url).pathname;

describe.skipIf(skipReason !== undefined)(
  'the daemon on the kubernetes provider (through the emulator)',
  () => {
    let emulator: KubernetesEmulator;
    let directory = '';
    let kubeconfigPath = '';
    beforeAll(async () => {
      emulator = await KubernetesEmulator.start(docker);
      directory = await mkdtemp(join(tmpdir(), 'gym-k8s-daemon-'));
      kubeconfigPath = join(directory, 'kubeconfig');
      await writeFile(kubeconfigPath, emulator.kubeconfig(NAMESPACE), { mode: 0o600 });
    });
    afterAll(async () => {
      await emulator?.close();
      if (directory !== '') await rm(directory, { recursive: true, force: true });
    });

    it('gym eval run scores all of swe-mini as on Docker: oracle 1, no-op 0, nothing left', async () => {
      // The emulator runs Pods from the engine's images; a Kubernetes daemon cannot build them
      // (gym eval run says so and goes on with what exists).
      await buildSweMiniImages(localImages(docker));
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
          `    options: { kubeconfigPath: ${kubeconfigPath} }`,
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
          // A row that differs says why (its outcome's details), so a failure in CI can be read.
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
      const pods = await fetch(
        `${emulator.url}/api/v1/namespaces/${NAMESPACE}/pods?labelSelector=gym.namespace%3D${namespace}`,
        { headers: { authorization: `Bearer ${emulator.token}` } },
      );
      expect(((await pods.json()) as { items: unknown[] }).items).toEqual([]);
    }, 300_000);

    it("runs a spec's service in a Pod, gated by its health check, and serves its declared port", async () => {
      const busybox = await testImage(docker, 'busybox');
      const daemon = await startTestDaemon(
        {
          namespace: `k8sports-${randomBytes(3).toString('hex')}`,
          providers: [
            { name: 'kubernetes', options: { kubeconfigPath, relayHelperPath: relayBinaryForTests() } },
          ],
        },
        { listen: true },
      );
      try {
        const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
        const sandbox = await client.createSandbox(httpdServiceSpec(busybox, 'served from a Pod\n'));
        expect(sandbox.service?.state).toBe('healthy');
        await expectServedPage(client, daemon.address.url!, sandbox.id, 'served from a Pod\n');
        await client.destroySandbox(sandbox.id);
      } finally {
        await daemon.stop({ destroy: true });
      }
    }, 120_000);

    it('keeps a warm pool of Pods, labelled with the pool, and hands one out warm', async () => {
      const busybox = await testImage(docker, 'busybox');
      const namespace = `k8spool-${randomBytes(3).toString('hex')}`;
      const daemon = await startTestDaemon(
        { namespace, providers: [{ name: 'kubernetes', options: { kubeconfigPath } }] },
        { listen: true },
      );
      try {
        const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
        await client.definePool('warm', { spec: { image: busybox, ttlSeconds: 600 }, minIdle: 2 });
        await expect.poll(async () => (await client.getPool('warm')).idle, { timeout: 60_000 }).toBe(2);
        const pods = async () => {
          const response = await fetch(
            `${emulator.url}/api/v1/namespaces/${NAMESPACE}/pods?labelSelector=gym.namespace%3D${namespace},gym.pool%3Dwarm`,
            { headers: { authorization: `Bearer ${emulator.token}` } },
          );
          return ((await response.json()) as { items: unknown[] }).items.length;
        };
        expect(await pods()).toBe(2);
        const sandbox = await client.createSandbox({ pool: 'warm' });
        expect((await client.exec(sandbox.id, { argv: ['echo', 'warm'] })).stdout).toBe('warm\n');
        expect((await client.getPool('warm')).hits).toBe(1);
        await client.destroySandbox(sandbox.id);
      } finally {
        await daemon.stop({ destroy: true });
      }
    }, 120_000);

    it('forks a Pod through the archive: children equal at fork time, apart, without the parent relay', async () => {
      const busybox = await testImage(docker, 'busybox');
      const namespace = `k8sfork-${randomBytes(3).toString('hex')}`;
      const daemon = await startTestDaemon(
        { namespace, providers: [{ name: 'kubernetes', options: { kubeconfigPath } }] },
        { listen: true },
      );
      try {
        const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
        const shell = async (id: string, command: string) =>
          (await client.exec(id, { command })).stdout.trim();
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
    }, 120_000);

    it('leaves no relay running after kill -9; its successor adopts the Pod and restores the same URL', async () => {
      const busybox = await testImage(docker, 'busybox');
      const namespace = `k8scrash-${randomBytes(3).toString('hex')}`;
      const stateDir = await mkdtemp(join(tmpdir(), 'gym-k8s-crash-'));
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
          `    options: { kubeconfigPath: ${kubeconfigPath} }`,
          '',
        ].join('\n'),
      );
      let child: ChildProcess | undefined;
      try {
        const started = await spawnDaemonProcess(configPath, stateDir);
        child = started.child;
        const sandbox = await started.client.createSandbox({ image: busybox, ttlSeconds: 600 });
        const { url } = await started.client.exposeGateway(sandbox.id);
        // What the agent inside does, straight through the engine, so it works with no daemon at all.
        const container = docker.getContainer(
          emulator.containerOf(NAMESPACE, `gym-${namespace}-${sandbox.id}`)!,
        );
        const inPod = async (command: string): Promise<string> => {
          // No TTY: busybox wget's progress meter crashes on a terminal of no size.
          const exec = await container.exec({
            Cmd: ['sh', '-c', command],
            AttachStdout: true,
            AttachStderr: true,
          });
          const stream = await exec.start({ hijack: true, stdin: false });
          const chunks: Buffer[] = [];
          const demuxer = new DockerStreamDemuxer((_name, payload) => chunks.push(payload));
          stream.on('data', (chunk: Buffer) => demuxer.push(chunk));
          await new Promise((resolve) => stream.on('end', resolve));
          return Buffer.concat(chunks).toString().trim();
        };
        // The gateway answers (any HTTP status: the route needs a rollout) through the relay.
        const ask = () =>
          inPod(
            `printf 'GET /v1/models HTTP/1.0\\r\\n\\r\\n' | nc 127.0.0.1 ${new URL(url).port} 2>&1 | head -1; echo " exit $?"`,
          );
        // The gateway's status line (any status: the route needs a rollout).
        const answered = /^HTTP\/1\.1 \d{3}/;
        const first = await ask();
        expect(first, first).toMatch(answered);
        const relays = () =>
          inPod(
            'for p in /proc/[0-9]*; do case "$(tr "\\0" " " < $p/cmdline 2>/dev/null)" in /tmp/.gym-relay*) echo $p;; esac; done | wc -l',
          );
        expect(Number(await relays())).toBeGreaterThan(0);

        child.kill('SIGKILL');
        await new Promise((resolve) => child!.once('exit', resolve));
        // The stream dropped with the daemon: the relay's stdin ended and it exited.
        await expect.poll(async () => Number(await relays()), { timeout: 5000 }).toBe(0);
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
      await testImage(docker, 'debian-base');
      const model = await startScriptedModelServer(
        ModelScriptSchema.parse({
          conversations: [
            {
              match: 'ERROR',
              replies: [
                {
                  content: 'Count them.\n```bash\ngrep -c ERROR /app/server.log > /app/error_count.txt\n```',
                },
                { content: 'Done.\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```' },
              ],
            },
          ],
        }),
      );
      const stateDir = await mkdtemp(join(tmpdir(), 'gym-k8s-miniswe-'));
      const configPath = join(stateDir, 'gym.yaml');
      await writeFile(
        configPath,
        [
          `stateDir: ${stateDir}`,
          `namespace: k8sswe-${randomBytes(3).toString('hex')}`,
          'listen: { host: 127.0.0.1, port: 0 }',
          'logLevel: warn',
          'providers:',
          '  - name: kubernetes',
          `    options: { kubeconfigPath: ${kubeconfigPath} }`,
          `gateway: { upstream: { baseUrl: ${model.baseUrl} }, maxRetries: 0 }`,
          '',
        ].join('\n'),
      );
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
    }, 180_000);
  },
);

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
