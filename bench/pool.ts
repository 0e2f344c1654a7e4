/**
 * Warm pools against cold creates, over HTTP, in one run: cold create p50 (no pool), warm
 * acquire p50/p99 (a pool with enough idle), and the wall time of 64 concurrent acquires from a
 * pool of 64. Prints progress on stderr and one JSON line on stdout.
 *
 *   npm run bench:pool       (BENCH_POOL_COLD=20, BENCH_POOL_WARM=40, BENCH_POOL_BURST=64)
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { GymClient } from '../client/client.ts';
import type { Logger } from '../core/logger.ts';
import { loadConfig } from '../daemon/config.ts';
import { startDaemon } from '../daemon/daemon.ts';
import { imageReference } from '../images/build.ts';
import { findImageDefinition } from '../images/definitions.ts';
import { percentile, round } from './stats.ts';

const coldCount = Number(process.env.BENCH_POOL_COLD ?? 20);
const warmCount = Number(process.env.BENCH_POOL_WARM ?? 40);
const burstCount = Number(process.env.BENCH_POOL_BURST ?? 64);
/** `--runtime runsc`: the same figures under gVisor (docs/isolation-tiers.md); default the engine's runc. */
const runtimeAt = process.argv.indexOf('--runtime');
const runtime = runtimeAt === -1 ? 'runc' : (process.argv[runtimeAt + 1] ?? 'runc');
const stateDir = await mkdtemp(join(tmpdir(), 'gym-bench-pool-'));
const config = await loadConfig({
  env: {},
  overrides: [
    {
      stateDir,
      namespace: 'bench-pool',
      listen: { host: '127.0.0.1', port: 0 },
      logLevel: 'warn',
      ...(runtime === 'runc' ? {} : { providers: [{ name: 'docker', options: { runtime } }] }),
    },
  ],
});
const logger = pino({ level: 'warn' }, pino.destination(2)) as unknown as Logger & ReturnType<typeof pino>;
const daemon = await startDaemon({ config, logger });
const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
const image = await imageReference(findImageDefinition('busybox')!);
const log = (message: string) => process.stderr.write(`bench:pool: ${message}\n`);

async function fill(name: string, size: number): Promise<void> {
  // maxTotal = size: once all are handed out the pool does not refill, so nothing competes with the measurement.
  await client.definePool(name, {
    spec: { image },
    minIdle: size,
    maxIdle: size,
    maxTotal: size,
    refillConcurrency: 8,
  });
  const started = performance.now();
  while ((await client.getPool(name)).idle < size) {
    if (performance.now() - started > 300_000) throw new Error(`pool ${name} did not fill`);
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
  log(`pool ${name} filled to ${size} in ${Math.round(performance.now() - started)} ms`);
}

try {
  log(`${coldCount} sequential cold creates`);
  const cold: number[] = [];
  for (let index = 0; index < coldCount; index += 1) {
    const started = performance.now();
    const sandbox = await client.createSandbox({ image });
    cold.push(performance.now() - started);
    await client.destroySandbox(sandbox.id);
  }

  await fill('warm', warmCount);
  const warm: number[] = [];
  let warmHits = 0;
  for (let index = 0; index < warmCount; index += 1) {
    const started = performance.now();
    const sandbox = await client.createSandbox({ pool: 'warm' });
    warm.push(performance.now() - started);
    if (sandbox.fromPool) warmHits += 1;
  }
  await client.removePool('warm');

  await fill('burst', burstCount);
  const burstStarted = performance.now();
  const burst = await Promise.all(
    Array.from({ length: burstCount }, () => client.createSandbox({ pool: 'burst' })),
  );
  const burstMs = performance.now() - burstStarted;
  await client.removePool('burst');

  const coldCreateP50Ms = percentile(cold, 0.5);
  const warmAcquireP50Ms = percentile(warm, 0.5);
  console.log(
    JSON.stringify({
      bench: 'pool',
      runtime,
      coldCreateP50Ms: round(coldCreateP50Ms),
      coldCreateP99Ms: round(percentile(cold, 0.99)),
      warmAcquireP50Ms: round(warmAcquireP50Ms),
      warmAcquireP99Ms: round(percentile(warm, 0.99)),
      warmHits,
      warmCount,
      burst64Ms: round(burstMs),
      burstHits: burst.filter((sandbox) => sandbox.fromPool).length,
      speedup: round(coldCreateP50Ms / warmAcquireP50Ms, 1),
    }),
  );
} finally {
  log('destroying every sandbox');
  await daemon.stop({ destroy: true });
  await rm(stateDir, { recursive: true, force: true });
}
