/**
 * Exec latency through the HTTP API against the same sandbox's provider called in-process, in
 * one run: what the daemon's HTTP layer, auth, validation and lease bookkeeping cost.
 *
 *   npm run bench:api            (BENCH_API_COUNT=300 by default)
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { pino } from 'pino';
import { GymClient } from '../client/client.ts';
import type { Logger } from '../core/logger.ts';
import { ExecRequestSchema } from '../core/schemas/exec.ts';
import { loadConfig } from '../daemon/config.ts';
import { startDaemon } from '../daemon/daemon.ts';
import { imageReference } from '../images/build.ts';
import { findImageDefinition } from '../images/definitions.ts';
import { percentile, round, timeSequential } from './stats.ts';

const count = Number(process.env.BENCH_API_COUNT ?? 300);
const oneShotCount = Math.max(20, Math.round(count / 5));
const stateDir = await mkdtemp(join(tmpdir(), 'gym-bench-api-'));
const config = await loadConfig({
  env: {},
  overrides: [{ stateDir, namespace: 'bench-api', listen: { host: '127.0.0.1', port: 0 }, logLevel: 'warn' }],
});
const logger = pino({ level: 'warn' }, pino.destination(2)) as unknown as Logger & ReturnType<typeof pino>;
const daemon = await startDaemon({ config, logger });
const client = new GymClient({ url: daemon.address.url!, token: daemon.token });
const image = await imageReference(findImageDefinition('busybox')!);

try {
  const sandbox = await client.createSandbox({ image, ttlSeconds: 600 });
  const provider = daemon.manager.providers.get(sandbox.provider)!;
  const inProcessRequest = ExecRequestSchema.parse({ argv: ['true'], session: 'bench-direct' });
  process.stderr.write(`bench:api: ${count} session execs and ${oneShotCount} one-shot execs per path\n`);
  const inProcessSession = await timeSequential(count, 20, () => provider.exec(sandbox.id, inProcessRequest));
  const httpSession = await timeSequential(count, 20, () =>
    client.exec(sandbox.id, { argv: ['true'], session: 'bench-http' }),
  );
  const httpOneShot = await timeSequential(oneShotCount, 5, () =>
    client.exec(sandbox.id, { argv: ['true'] }),
  );
  const inProcessOneShot = await timeSequential(oneShotCount, 5, () =>
    provider.exec(sandbox.id, ExecRequestSchema.parse({ argv: ['true'] })),
  );
  await client.destroySandbox(sandbox.id);
  console.log(
    JSON.stringify({
      bench: 'api',
      count,
      httpSessionExecP50Ms: round(percentile(httpSession, 0.5)),
      httpSessionExecP99Ms: round(percentile(httpSession, 0.99)),
      httpOneShotExecP50Ms: round(percentile(httpOneShot, 0.5)),
      inProcessSessionExecP50Ms: round(percentile(inProcessSession, 0.5)),
      inProcessOneShotExecP50Ms: round(percentile(inProcessOneShot, 0.5)),
      httpSessionOverheadMs: round(percentile(httpSession, 0.5) - percentile(inProcessSession, 0.5)),
    }),
  );
} finally {
  await daemon.stop({ destroy: true });
  await rm(stateDir, { recursive: true, force: true });
}
