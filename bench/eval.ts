/**
 * swe-mini with the oracle harness against one in-process daemon, in one run: the CPU-seconds
 * one rollout costs (the pipeline at concurrency 1), next to the floor (the same tasks' least
 * work done with dockerode directly, bench/eval-cost.ts), and their ratio; then the throughput at
 * concurrency 1 and 8. On a 2-core machine eval is CPU-bound, so CPU per rollout is the figure
 * that matters; the speedup is capped by the cores.
 *
 *   npm run bench:eval
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Modem from 'docker-modem';
import { pino } from 'pino';
import { buildSweMiniImages } from '../cli/task-images.ts';
import { GymClient } from '../client/client.ts';
import type { Logger } from '../core/logger.ts';
import { loadConfig } from '../daemon/config.ts';
import { startDaemon } from '../daemon/daemon.ts';
import { loadEnvironment, readRows } from '../environments/environment.ts';
import { runEval } from '../environments/runner/eval.ts';
import { HarnessRegistry } from '../harnesses/registry.ts';
import { createDockerClient } from '../providers/docker/index.ts';
import { CpuMeter, type CpuReading, EngineCallCounter, runFloor } from './eval-cost.ts';
import { round } from './stats.ts';

// Before the daemon starts, so every engine call of the run goes through it.
const engineCalls = new EngineCallCounter(Modem.prototype);
const logger = pino({ level: 'warn' }, pino.destination(2)) as unknown as Logger & ReturnType<typeof pino>;
const stateDir = await mkdtemp(join(tmpdir(), 'gym-bench-eval-'));
const daemon = await startDaemon({
  config: await loadConfig({
    env: {},
    overrides: [
      { stateDir, namespace: 'bench-eval', listen: { host: '127.0.0.1', port: 0 }, logLevel: 'warn' },
    ],
  }),
  logger,
});
const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
// The task images, built by the daemon's provider when missing (content-addressed: a no-op after).
await buildSweMiniImages(client);
const environment = await loadEnvironment('swe-mini');
const rows = await readRows(environment.dataPath);
const harness = await new HarnessRegistry().create('oracle');

const docker = createDockerClient();
const FLOOR_PREFIX = 'gym-bench-evalfloor';

/** CPU-seconds per rollout, by where they were spent. */
function perRollout(reading: CpuReading, rollouts: number) {
  const each = (value: number) => round(value / rollouts, 3);
  return {
    total: each(reading.total),
    own: each(reading.self + reading.shims + reading.containers),
    self: each(reading.self),
    dockerd: each(reading.dockerd),
    containerd: each(reading.containerd),
    shims: each(reading.shims),
    containers: each(reading.containers),
    machine: each(reading.machine),
  };
}

/** A phase's CPU, and the engine calls it made by kind. */
interface Measured {
  cpu: CpuReading;
  calls: Record<string, number>;
}

/** Engine calls per rollout: in all, and by kind. */
function callsPerRollout(calls: Record<string, number>, rollouts: number) {
  const each = (value: number) => round(value / rollouts, 2);
  return {
    total: each(Object.values(calls).reduce((sum, count) => sum + count, 0)),
    byKind: Object.fromEntries(Object.entries(calls).map(([kind, count]) => [kind, each(count)])),
  };
}

async function measureFloor(): Promise<Measured> {
  const meter = new CpuMeter(docker, (name) => name.startsWith(FLOOR_PREFIX));
  await meter.start();
  engineCalls.take();
  const started = performance.now();
  for (const [index, row] of rows.entries()) {
    const log = await runFloor(docker, FLOOR_PREFIX, row as never, index);
    for (const test of row.FAIL_TO_PASS as string[])
      if (!log.includes(`PASSED ${test}`))
        throw new Error(`floor: ${test} did not pass for ${row.instance_id}`);
  }
  const calls = engineCalls.take();
  const reading = await meter.stop();
  process.stderr.write(
    `bench:eval: floor: ${rows.length} rollouts in ${round((performance.now() - started) / 1000, 1)} s\n`,
  );
  return { cpu: reading, calls };
}

async function measurePipelineCpu(): Promise<Measured> {
  const meter = new CpuMeter(
    docker,
    (name, labels) => name.startsWith('gym-bench-eval-') || labels['gym.namespace'] === 'bench-eval',
  );
  await meter.start();
  engineCalls.take();
  await measure(1, 'cpu');
  const calls = engineCalls.take();
  return { cpu: await meter.stop(), calls };
}

async function measure(concurrency: number, tag = '', taskRows = rows): Promise<number> {
  const started = performance.now();
  const summary = await runEval({
    client,
    environment,
    rows: taskRows,
    harness,
    harnessName: 'oracle',
    modelName: 'none',
    numRepeats: 1,
    concurrency,
    output: join(stateDir, `c${concurrency}${tag}.jsonl`),
    resume: false,
    maxInfraAttempts: 2,
    logger,
  });
  if (summary.metrics['mean/reward'] !== 1)
    throw new Error(`oracle scored ${summary.metrics['mean/reward']} at concurrency ${concurrency}`);
  const minutes = (performance.now() - started) / 60_000;
  process.stderr.write(
    `bench:eval: concurrency ${concurrency}: ${summary.rollouts} rollouts in ${round(minutes * 60, 1)} s\n`,
  );
  return summary.rollouts / minutes;
}

let stopped = false;
try {
  // One untimed rollout of each first, so neither pays for a cold page cache or a first JIT.
  await runFloor(docker, FLOOR_PREFIX, rows[0] as never, 999);
  await measure(1, 'warm', rows.slice(0, 1));
  const pipelineCpu = await measurePipelineCpu();
  const sequential = await measure(1);
  const parallel = await measure(8);
  // The floor runs with the daemon stopped, so this process's CPU is the floor's own.
  await daemon.stop({ destroy: true });
  stopped = true;
  const floor = await measureFloor();
  const pipelinePer = perRollout(pipelineCpu.cpu, rows.length);
  const floorPer = perRollout(floor.cpu, rows.length);
  const pipelineCalls = callsPerRollout(pipelineCpu.calls, rows.length);
  const floorCalls = callsPerRollout(floor.calls, rows.length);
  console.log(
    JSON.stringify({
      bench: 'eval',
      rollouts: rows.length,
      cpuSecondsPerRollout: pipelinePer.total,
      floorCpuSecondsPerRollout: floorPer.total,
      cpuRatio: round(pipelinePer.total / floorPer.total, 2),
      // Without dockerd and containerd, which other users of the engine load too.
      ownCpuSecondsPerRollout: pipelinePer.own,
      floorOwnCpuSecondsPerRollout: floorPer.own,
      ownCpuRatio: round(pipelinePer.own / floorPer.own, 2),
      machineCpuSecondsPerRollout: pipelinePer.machine,
      floorMachineCpuSecondsPerRollout: floorPer.machine,
      pipelineCpu: pipelinePer,
      floorCpu: floorPer,
      // Engine API calls per rollout (dockerode requests of this process: the daemon's, the floor's).
      engineCallsPerRollout: pipelineCalls.total,
      floorEngineCallsPerRollout: floorCalls.total,
      pipelineEngineCalls: pipelineCalls.byKind,
      floorEngineCalls: floorCalls.byKind,
      seqRolloutsPerMin: round(sequential, 1),
      parRolloutsPerMin: round(parallel, 1),
      speedup: round(parallel / sequential, 2),
    }),
  );
} finally {
  engineCalls.close();
  if (!stopped) await daemon.stop({ destroy: true });
  await rm(stateDir, { recursive: true, force: true });
}
