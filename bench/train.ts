/**
 * Rollouts per second through `gym eval serve`'s `POST /run` (NeMo Gym's agent-server contract)
 * against the in-process runner (`gym eval run`'s) doing the same rows in the same run, at
 * concurrency 64 and 256: terminal tasks, the mini-swe harness and the scripted model (one call,
 * then submit), sandboxes from warm pools on Docker. The daemon runs as its own process (`gym
 * daemon start`), so its CPU-seconds and RSS per rollout are its own; this process holds the
 * runner, the server, its HTTP client and the scripted model. Each phase counts from its pools'
 * definition to their removal, so both pay for filling them.
 *
 *   npm run bench:train   (GYM_BENCH_TRAIN_CONCURRENCY=64,256, GYM_BENCH_TRAIN_ROWS=N and
 *                          GYM_BENCH_TRAIN_SERVE_FIRST=1 to change)
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { connect, readToken } from '../cli/connect.ts';
import { RunAdmission } from '../cli/serve/admission.ts';
import { buildRolloutServer } from '../cli/serve/rollout-server.ts';
import { RunKeys } from '../cli/serve/run-keys.ts';
import type { GymClient } from '../client/client.ts';
import type { Logger } from '../core/logger.ts';
import { loadEnvironment, readRows } from '../environments/environment.ts';
import { runEval } from '../environments/runner/eval.ts';
import { aggregateLines } from '../environments/runner/eval-metrics.ts';
import { materialize } from '../environments/runner/eval-plan.ts';
import { createRowRunner } from '../environments/runner/row-runner.ts';
import { HarnessRegistry } from '../harnesses/registry.ts';
import { ModelScriptSchema } from '../harnesses/scripted-model/script.ts';
import { startScriptedModelServer } from '../harnesses/scripted-model/server.ts';
import { createDockerClient } from '../providers/docker/index.ts';
import { round } from './stats.ts';

const CLI = new URL('../cli/main.ts', import.meta.url).pathname;
const CONCURRENCIES = (process.env.GYM_BENCH_TRAIN_CONCURRENCY ?? '64,256').split(',').map(Number);
const TICKS_PER_SECOND = 100;
// This run's own: a sandbox another run left behind is never waited for, and any this one leaves is counted.
const NAMESPACE = `bench-train-${randomBytes(3).toString('hex')}`;
const logger = pino({ level: 'warn' }, pino.destination(2)) as unknown as Logger & ReturnType<typeof pino>;

/** A process's CPU-seconds so far and its resident memory now (MiB), from /proc. */
async function processUsage(pid: number): Promise<{ cpuSeconds: number; rssMiB: number }> {
  const stat = (await readFile(`/proc/${pid}/stat`, 'utf8')).split(') ')[1]!.split(' ');
  // utime and stime are fields 14 and 15 of the whole line (1-based), 12 and 13 after "pid (comm) ".
  const cpuSeconds = (Number(stat[11]) + Number(stat[12])) / TICKS_PER_SECOND;
  const rss = /VmRSS:\s+(\d+) kB/.exec(await readFile(`/proc/${pid}/status`, 'utf8'));
  return { cpuSeconds, rssMiB: Number(rss?.[1] ?? 0) / 1024 };
}

async function startDaemonProcess(
  stateDir: string,
  modelUrl: string,
): Promise<{ child: ChildProcess; client: GymClient }> {
  const child = spawn(
    process.execPath,
    [
      CLI,
      'daemon',
      'start',
      '--state-dir',
      stateDir,
      '--namespace',
      NAMESPACE,
      '--destroy-on-shutdown',
      '--port',
      '0',
    ],
    {
      env: { ...process.env, GYM_POLICY_BASE_URL: modelUrl, GYM_LOG_LEVEL: 'warn', GYM_CONFIG: '' },
      stdio: ['ignore', 'ignore', 'inherit'],
    },
  );
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the daemon exited ${child.exitCode}`);
    try {
      const client = await connect(stateDir);
      await client.health();
      return { child, client };
    } catch {
      await new Promise((resolve) => setTimeout(resolve, 200));
    }
  }
}

const docker = createDockerClient();
const stateDir = await mkdtemp(join(tmpdir(), 'gym-bench-train-'));
const model = await startScriptedModelServer(
  ModelScriptSchema.parse({
    conversations: [
      { replies: [{ content: 'Done.\n```bash\necho COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n```' }] },
    ],
  }),
);
const { child: daemonProcess, client } = await startDaemonProcess(stateDir, model.baseUrl);
const daemonPid = daemonProcess.pid!;
const token = await readToken(stateDir);
const environment = await loadEnvironment('terminal');
const tasks = await readRows(environment.dataPath);
const harness = await new HarnessRegistry().create('mini-swe');
const shared = {
  client,
  environment,
  harness,
  harnessName: 'mini-swe',
  modelName: 'scripted',
  maxInfraAttempts: 2,
  usePools: true,
  logger,
};

interface Phase {
  rollouts: number;
  seconds: number;
  rolloutsPerSecond: number;
  daemonCpuSecondsPerRollout: number;
  daemonRssMiBEnd: number;
  daemonRssMiBGrowthPerRollout: number;
  runnerCpuSecondsPerRollout: number;
  infraErrors: number;
}

/**
 * Waits until the daemon holds no sandbox (the previous phase's pools drained, its last rollouts'
 * sandboxes removed), so a phase does not pay for the one before it: without this the second
 * phase ran at about half the speed of the first, whichever it was.
 */
async function settle(): Promise<void> {
  const engineHolds = async () =>
    (await docker.listContainers({ all: true, filters: { label: [`gym.namespace=${NAMESPACE}`] } })).length >
    0;
  while ((await client.listSandboxes()).length > 0 || (await engineHolds()))
    await new Promise((resolve) => setTimeout(resolve, 500));
}

async function measure(rollouts: number, body: () => Promise<number>): Promise<Phase> {
  await settle();
  const daemonBefore = await processUsage(daemonPid);
  const selfBefore = process.cpuUsage();
  const started = performance.now();
  const infraErrors = await body();
  const seconds = (performance.now() - started) / 1000;
  const self = process.cpuUsage(selfBefore);
  const daemonAfter = await processUsage(daemonPid);
  return {
    rollouts,
    seconds: round(seconds, 1),
    rolloutsPerSecond: round(rollouts / seconds, 3),
    daemonCpuSecondsPerRollout: round((daemonAfter.cpuSeconds - daemonBefore.cpuSeconds) / rollouts, 4),
    daemonRssMiBEnd: round(daemonAfter.rssMiB, 1),
    daemonRssMiBGrowthPerRollout: round((daemonAfter.rssMiB - daemonBefore.rssMiB) / rollouts, 3),
    runnerCpuSecondsPerRollout: round((self.user + self.system) / 1e6 / rollouts, 4),
    infraErrors,
  };
}

/** The same rows through gym eval run's runner, in this process. */
async function inProcess(concurrency: number, repeats: number, rollouts: number): Promise<Phase> {
  return measure(rollouts, async () => {
    const summary = await runEval({
      ...shared,
      rows: tasks,
      numRepeats: repeats,
      concurrency,
      output: join(stateDir, `in-process-c${concurrency}.jsonl`),
      resume: false,
    });
    if (summary.rollouts + summary.failures !== rollouts)
      throw new Error(
        `in-process: ${summary.rollouts} rollouts and ${summary.failures} failures of ${rollouts}`,
      );
    return summary.failures;
  });
}

/** The same rows sent to POST /run over loopback HTTP, `concurrency` at once. */
async function throughServe(concurrency: number, repeats: number, rollouts: number): Promise<Phase> {
  const rows = materialize(tasks, repeats, 'mini-swe');
  return measure(rollouts, async () => {
    const runner = await createRowRunner({
      ...shared,
      concurrency,
      output: join(stateDir, `serve-c${concurrency}.jsonl`),
      expectedRows: tasks,
      expectedRepeats: repeats,
    });
    const app = buildRolloutServer({
      runRow: (row) => runner.run(row),
      aggregate: (lines) => aggregateLines(lines, 'mini-swe'),
      admission: new RunAdmission({ concurrency, queue: concurrency }),
      keys: new RunKeys(),
      token,
    });
    let infraErrors = 0;
    try {
      const url = await app.listen({ host: '127.0.0.1', port: 0 });
      let next = 0;
      const worker = async () => {
        while (next < rows.length) {
          const row = rows[next++]!;
          const reply = await fetch(`${url}/run`, {
            method: 'POST',
            headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
            body: JSON.stringify(row),
          });
          if (reply.status !== 200) throw new Error(`/run answered ${reply.status}: ${await reply.text()}`);
          const line = (await reply.json()) as { mask_sample?: boolean };
          if (line.mask_sample === true) infraErrors += 1;
        }
      };
      await Promise.all(Array.from({ length: concurrency }, worker));
    } finally {
      await app.close();
      await runner.close();
    }
    return infraErrors;
  });
}

const results: Record<string, unknown> = {};
try {
  // One untimed row first, so neither side pays for a cold page cache or a first JIT.
  await inProcess(1, 1, tasks.length);
  for (const concurrency of CONCURRENCIES) {
    const wanted = Number(process.env.GYM_BENCH_TRAIN_ROWS ?? concurrency);
    const repeats = Math.max(1, Math.ceil(wanted / tasks.length));
    const rollouts = repeats * tasks.length;
    // In-process first unless GYM_BENCH_TRAIN_SERVE_FIRST=1: the second phase starts while the
    // engine still removes the first one's sandboxes, so the order is worth trying both ways.
    const serveFirst = process.env.GYM_BENCH_TRAIN_SERVE_FIRST === '1';
    const served0 = serveFirst ? await throughServe(concurrency, repeats, rollouts) : undefined;
    const local = await inProcess(concurrency, repeats, rollouts);
    process.stderr.write(`bench:train: in-process c${concurrency}: ${JSON.stringify(local)}\n`);
    const served = served0 ?? (await throughServe(concurrency, repeats, rollouts));
    process.stderr.write(`bench:train: serve c${concurrency}: ${JSON.stringify(served)}\n`);
    results[`c${concurrency}`] = {
      serve: served,
      inProcess: local,
      ratio: round(served.rolloutsPerSecond / local.rolloutsPerSecond, 3),
    };
  }
  process.stdout.write(
    `${JSON.stringify({ bench: 'train', environment: 'terminal', harness: 'mini-swe', model: 'scripted', pools: true, order: process.env.GYM_BENCH_TRAIN_SERVE_FIRST === '1' ? 'serve first' : 'in-process first', ...results })}\n`,
  );
} finally {
  const exited = new Promise((resolve) => daemonProcess.once('exit', resolve));
  daemonProcess.kill('SIGTERM');
  await exited;
  await model.close();
  await rm(stateDir, { recursive: true, force: true });
  // A daemon stopped with --destroy-on-shutdown should leave nothing; say so if it did, and clean up.
  const left = await docker.listContainers({ all: true, filters: { label: [`gym.namespace=${NAMESPACE}`] } });
  if (left.length > 0) {
    process.stderr.write(`bench:train: the stopped daemon left ${left.length} containers; removing them\n`);
    for (const container of left) await docker.getContainer(container.Id).remove({ force: true });
  }
}
