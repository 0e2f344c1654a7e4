/**
 * swe-mini with the oracle harness at concurrency 1 and at concurrency 8, in one run, against
 * one in-process daemon: how much sandbox set-up, agent and verification overlap.
 *
 *   npm run bench:eval
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { buildSweMiniImages } from '../cli/task-images.ts';
import { GymClient } from '../client/client.ts';
import type { Logger } from '../core/logger.ts';
import { loadConfig } from '../daemon/config.ts';
import { startDaemon } from '../daemon/daemon.ts';
import { loadEnvironment, readRows } from '../environments/environment.ts';
import { runEval } from '../environments/runner/eval.ts';
import { HarnessRegistry } from '../harnesses/registry.ts';
import { round } from './stats.ts';

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

async function measure(concurrency: number): Promise<number> {
  const started = performance.now();
  const summary = await runEval({
    client,
    environment,
    rows,
    harness,
    harnessName: 'oracle',
    modelName: 'none',
    numRepeats: 1,
    concurrency,
    output: join(stateDir, `c${concurrency}.jsonl`),
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

try {
  const sequential = await measure(1);
  const parallel = await measure(8);
  console.log(
    JSON.stringify({
      bench: 'eval',
      rollouts: rows.length,
      seqRolloutsPerMin: round(sequential, 1),
      parRolloutsPerMin: round(parallel, 1),
      speedup: round(parallel / sequential, 2),
    }),
  );
} finally {
  await daemon.stop({ destroy: true });
  await rm(stateDir, { recursive: true, force: true });
}
