/**
 * The daemon's own memory per sandbox and per exec, counted without an engine: a daemon in this
 * process on the in-memory provider, its heap measured after full collections. Creates `COUNT`
 * sandboxes, runs session execs and keepalives on them through the API (inject), deletes them,
 * and prints one JSON line of heap deltas. Needs `--expose-gc`:
 *
 *   npm run bench:memory            (BENCH_MEMORY_COUNT=1000 by default)
 */
import type { ProviderContext } from '../providers/sandbox-provider.ts';
import { startTestDaemon } from '../test/daemon-harness.ts';
import { MemoryProvider } from '../test/fixtures/memory-provider.ts';
import { round } from './stats.ts';

const gc = (globalThis as { gc?: () => void }).gc;
if (gc === undefined) {
  console.error('run with node --expose-gc');
  process.exit(2);
}
const count = Number(process.env.BENCH_MEMORY_COUNT ?? 1000);
const execs = 20 * count;
let provider: MemoryProvider | undefined;
const daemon = await startTestDaemon(
  { providers: [{ name: 'memory', maxLiveSandboxes: count + 1, queueSize: count + 1 }] },
  {
    factories: {
      memory: (_options: unknown, context: ProviderContext) => {
        provider = new MemoryProvider(context);
        return provider;
      },
    },
  },
);
const heap = () => {
  gc();
  gc();
  return process.memoryUsage().heapUsed;
};
const inject = (method: 'POST' | 'DELETE', url: string, payload?: object) =>
  daemon.app.inject({ method, url, headers: daemon.auth, ...(payload === undefined ? {} : { payload }) });
/** The in-memory provider keeps every exec request it saw (for tests): drop them, they are not the daemon's. */
const forgetExecs = () => {
  provider!.execs.length = 0;
};

async function sessionExecs(ids: string[], total: number): Promise<number> {
  const started = performance.now();
  for (let index = 0; index < total; index += 1) {
    await inject('POST', `/v1/sandboxes/${ids[index % ids.length]}/exec`, {
      argv: ['true'],
      session: 'bench',
    });
    if (index % 1000 === 0) forgetExecs();
  }
  forgetExecs();
  return (performance.now() - started) / total;
}

try {
  const idle = heap();
  const ids: string[] = [];
  const createStarted = performance.now();
  for (let index = 0; index < count; index += 1) {
    const response = await inject('POST', '/v1/sandboxes', {
      image: 'busybox',
      labels: { 'gym-bench': 'memory' },
    });
    ids.push(response.json().id);
  }
  const createMs = (performance.now() - createStarted) / count;
  const live = heap();
  // The first round warms the JIT; the second is what execs cost once warm.
  await sessionExecs(ids, execs);
  const warm = heap();
  const execMs = await sessionExecs(ids, execs);
  const afterExecs = heap();
  for (let index = 0; index < 2 * count; index += 1)
    await inject('POST', `/v1/sandboxes/${ids[index % count]}/keepalive`, {});
  const afterKeepalives = heap();
  for (const id of ids) await inject('DELETE', `/v1/sandboxes/${id}`);
  const afterDelete = heap();
  console.log(
    JSON.stringify({
      bench: 'daemon-memory',
      count,
      execs,
      heapIdleMiB: round(idle / 2 ** 20, 1),
      heapPerSandboxBytes: Math.round((live - idle) / count),
      heapPerWarmExecBytes: round((afterExecs - warm) / execs, 2),
      heapPerKeepaliveBytes: round((afterKeepalives - afterExecs) / (2 * count), 2),
      heapAfterDeleteVsIdleMiB: round((afterDelete - idle) / 2 ** 20, 2),
      createMsInProcess: round(createMs, 2),
      sessionExecMsInProcess: round(execMs, 3),
    }),
  );
} finally {
  await daemon.cleanup();
}
