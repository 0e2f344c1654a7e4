/** Leases and the reaper alone, on a real state store and a clock the test moves. */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { silentLogger } from '../../core/logger.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import { type SandboxRecord, StateStore } from '../state-store.ts';
import { Leases } from './leases.ts';
import { Reaper } from './reaper.ts';
import { SandboxRuntime } from './runtime.ts';

const START_MS = Date.parse('2026-01-01T00:00:00Z');
const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

async function setup() {
  const directory = await mkdtemp(join(tmpdir(), 'gym-sandboxes-'));
  const store = await StateStore.open(directory, silentLogger);
  cleanups.push(async () => {
    await store.close();
    await rm(directory, { recursive: true, force: true });
  });
  let nowMs = START_MS;
  const clock = { now: () => nowMs, monotonicMs: () => performance.now() };
  const advance = (seconds: number) => {
    nowMs += seconds * 1000;
  };
  const put = async (id: string, ttlSeconds: number, deadlineSeconds: number) => {
    const record: SandboxRecord = {
      id,
      provider: 'memory',
      spec: SandboxSpecSchema.parse({ image: 'img', ttlSeconds }),
      pool: null,
      createdAt: new Date(nowMs).toISOString(),
      leaseExpiresAt: new Date(nowMs + ttlSeconds * 1000).toISOString(),
      deadlineAt: new Date(nowMs + deadlineSeconds * 1000).toISOString(),
      providerRef: id,
      poolState: null,
      fromPool: false,
      execEnv: {},
      gatewayUrl: null,
    };
    await store.put(record);
    return record;
  };
  return { store, clock, advance, put, leases: new Leases(store, clock) };
}

describe('Leases', () => {
  it('renews by use in memory, and writes to disk only once the lease moved by its slack', async () => {
    const { store, advance, put, leases } = await setup();
    const record = await put('sbx-a', 100, 1000);
    advance(5);
    await leases.touch(record);
    // Moved by 5 s of a 100 s lease: under the 10 % slack, so only in memory.
    expect(leases.expiresAtMs(record)).toBe(START_MS + 105_000);
    expect(store.get('sbx-a')!.leaseExpiresAt).toBe(record.leaseExpiresAt);
    advance(6);
    await leases.touch(record);
    expect(Date.parse(store.get('sbx-a')!.leaseExpiresAt)).toBe(START_MS + 111_000);
  });

  it('never renews past the deadline, and counts either as expiry', async () => {
    const { advance, put, leases } = await setup();
    const record = await put('sbx-b', 100, 150);
    advance(90);
    await leases.renew(record);
    expect(leases.expiresAtMs(record)).toBe(START_MS + 150_000);
    expect(leases.isExpired(record, START_MS + 149_999)).toBe(false);
    expect(leases.isExpired(record, START_MS + 150_000)).toBe(true);
    leases.forget(record.id);
    // Forgotten in memory: the persisted lease (renewed above) counts.
    expect(leases.expiresAtMs(record)).toBe(START_MS + 100_000);
  });
});

describe('Reaper', () => {
  it('destroys what expired, forgets what is unreachable past its deadline, and skips destroys in flight', async () => {
    const { clock, advance, put, leases, store } = await setup();
    const runtime = new SandboxRuntime();
    await put('sbx-live', 100, 1000);
    await put('sbx-expired', 10, 1000);
    await put('sbx-lost', 10, 20);
    await put('sbx-busy', 10, 1000);
    runtime.unreachable.set('sbx-lost', 'host-a: down');
    runtime.destroying.set('sbx-busy', new Promise(() => {}));
    const calls: string[] = [];
    let isShuttingDown = false;
    const reaper = new Reaper({
      store,
      runtime,
      leases,
      clock,
      logger: silentLogger,
      lifecycle: {
        get isShuttingDown() {
          return isShuttingDown;
        },
        destroy: async (id, reason) => {
          calls.push(`destroy ${id} ${reason}`);
        },
        forget: async (record, reason) => {
          calls.push(`forget ${record.id} ${reason}`);
        },
      },
    });
    advance(30);
    await reaper.reap();
    expect(calls.sort()).toEqual(['destroy sbx-expired expired', 'forget sbx-lost gone']);
    isShuttingDown = true;
    calls.length = 0;
    await reaper.reap();
    expect(calls).toEqual([]);
  });
});
