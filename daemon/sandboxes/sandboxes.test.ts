/**
 * The parts of the sandbox manager (`sandboxes/`) each alone, on a real state store, the memory
 * provider and a clock the test moves: leases, the reaper, the lifecycle, the operations on a live
 * sandbox, reconcile and gateway reach.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { GymError } from '../../core/errors.ts';
import { silentLogger } from '../../core/logger.ts';
import { type ExecRequest, ExecRequestSchema, type ExecResult } from '../../core/schemas/exec.ts';
import { SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import type { ProviderCapabilities, ProviderContext } from '../../providers/sandbox-provider.ts';
import { MemoryProvider } from '../../test/fixtures/memory-provider.ts';
import { testContext } from '../../test/fixtures/provider-context.ts';
import { DaemonConfigSchema } from '../config.ts';
import { type SandboxRecord, StateStore } from '../state-store.ts';
import { GatewayReach } from './gateway-reach.ts';
import { Leases } from './leases.ts';
import { SandboxLifecycle } from './lifecycle.ts';
import { SandboxOperations } from './operations.ts';
import { Reaper } from './reaper.ts';
import { Reconciler } from './reconcile.ts';
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
      lineage: null,
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

/**
 * A memory provider with gateway reach (each sandbox gets the URL asked for, else a port of its
 * own) and an exec the test can make answer `sandbox_gone`.
 */
class ReachableProvider extends MemoryProvider {
  readonly exposed: Array<{ id: string; url: string | undefined }> = [];
  /** The next exec answers as if the sandbox died under it. */
  goneOnNextExec = false;
  /** Restores come back at another port (a provider that could not keep the URL). */
  movesOnRestore = false;
  #port = 4100;

  constructor(context: ProviderContext, capabilities: Partial<ProviderCapabilities>) {
    super(context, { capabilities: { gatewayReach: true, ...capabilities } });
  }

  async exposeGateway(id: string, options: { socketPath: string; url?: string }) {
    await this.get(id);
    this.exposed.push({ id, url: options.url });
    if (options.url !== undefined && !this.movesOnRestore) return { url: options.url };
    this.#port += 1;
    return { url: `http://127.0.0.1:${this.#port}/v1` };
  }

  override async exec(id: string, request: ExecRequest): Promise<ExecResult> {
    const result = await super.exec(id, request);
    if (!this.goneOnNextExec) return result;
    this.goneOnNextExec = false;
    return { ...result, status: 'sandbox_gone', exitCode: null };
  }
}

/** The parts wired as the manager wires them, over one memory provider named `memory`. */
async function wire(
  options: {
    capabilities?: Partial<ProviderCapabilities>;
    provider?: Record<string, unknown>;
    socketPath?: string | null;
  } = {},
) {
  const base = await setup();
  const { store, clock, leases } = base;
  const daemonId = 'daemon-parts';
  const provider = new ReachableProvider(testContext({ clock, daemonId }), options.capabilities ?? {});
  const config = DaemonConfigSchema.parse({
    stateDir: tmpdir(),
    providers: [{ name: 'memory', ...options.provider }],
    destroyWaitMs: 5_000,
  });
  const runtime = new SandboxRuntime();
  const lifecycle = new SandboxLifecycle({
    config,
    providers: new Map([['memory', provider]]),
    store,
    runtime,
    leases,
    metrics: undefined,
    logger: silentLogger,
  });
  const gateway = new GatewayReach({
    store,
    runtime,
    logger: silentLogger,
    socketPath: options.socketPath === null ? undefined : (options.socketPath ?? '/run/gym/gateway.sock'),
  });
  const operations = new SandboxOperations({ lifecycle, leases, store, gateway, metrics: undefined });
  const reconciler = new Reconciler({
    store,
    runtime,
    leases,
    lifecycle,
    gateway,
    daemonId,
    owners: undefined,
    metrics: undefined,
    clock,
    logger: silentLogger,
  });
  return { ...base, daemonId, provider, runtime, lifecycle, gateway, operations, reconciler };
}

describe('SandboxLifecycle', () => {
  it('admits up to maxLiveSandboxes, refuses past a full queue, and frees the slot on destroy', async () => {
    const { lifecycle, provider, store } = await wire({ provider: { maxLiveSandboxes: 1, queueSize: 0 } });
    const removed: string[] = [];
    lifecycle.onRemoved((record, reason) => removed.push(`${record.id} ${reason}`));
    const first = await lifecycle.create({ image: 'img', labels: { who: 'a' } });
    expect(store.get(first.id)).toMatchObject({ provider: 'memory', poolState: null, fromPool: false });
    expect(provider.sandboxes.has(first.id)).toBe(true);
    await expect(lifecycle.create({ image: 'img' })).rejects.toMatchObject({ code: 'CAPACITY_EXCEEDED' });
    // Two destroys at once are one destroy; a third, after, is success too.
    await Promise.all([lifecycle.destroy(first.id), lifecycle.destroy(first.id)]);
    await lifecycle.destroy(first.id);
    expect(removed).toEqual([`${first.id} request`]);
    expect(store.get(first.id)).toBeUndefined();
    expect(provider.sandboxes.has(first.id)).toBe(false);
    expect((await lifecycle.create({ image: 'img' })).id).not.toBe(first.id);
  });

  it('checks the spec against the provider before creating anything, and creates nothing at shutdown', async () => {
    const { lifecycle, provider, store } = await wire();
    await expect(lifecycle.create({ image: 'img', resources: { gpus: 1 } })).rejects.toMatchObject({
      code: 'CAPABILITY_UNSUPPORTED',
      details: { capability: 'gpus' },
    });
    await expect(lifecycle.create({ image: 'img', provider: 'nope' })).rejects.toMatchObject({
      code: 'PROVIDER_NOT_FOUND',
    });
    lifecycle.beginShutdown();
    await expect(lifecycle.create({ image: 'img' })).rejects.toMatchObject({ code: 'SHUTTING_DOWN' });
    expect(provider.sandboxes.size).toBe(0);
    expect(store.all()).toEqual([]);
  });

  it("waits at shutdown for a pool's refill under way, and destroys what it made", async () => {
    const { lifecycle, provider, store } = await wire();
    let finish = () => {};
    const held = new Promise<void>((resolve) => {
      finish = resolve;
    });
    const create = provider.create.bind(provider);
    provider.create = async (...args: Parameters<typeof create>) => {
      const info = await create(...args);
      await held;
      return info;
    };
    // A refill has no request behind it: nothing else waits for it when the daemon stops.
    const refill = lifecycle.createIdle(SandboxSpecSchema.parse({ image: 'img' }), 'p', 600);
    await new Promise((resolve) => setTimeout(resolve, 10));
    lifecycle.beginShutdown();
    const settled = lifecycle.settle({ destroy: true });
    setTimeout(finish, 20);
    await settled;
    // Before, settle saw an empty store and returned; the refill then finished on a provider and
    // a store the daemon had closed, and its sandbox was left behind.
    await refill;
    expect(provider.sandboxes.size).toBe(0);
    expect(store.all()).toEqual([]);
  });

  it("keeps idle pool members out of listings until claimed once, with the claim's labels, env and lease", async () => {
    const { lifecycle, clock, advance } = await wire();
    const spec = SandboxSpecSchema.parse({ image: 'img', labels: { pool: 'p' } });
    const idle = (await lifecycle.createIdle(spec, 'p', 600))!;
    expect(idle.poolState).toBe('idle');
    expect(lifecycle.list()).toEqual([]);
    advance(60);
    const claimed = await lifecycle.claim(idle.id, { ttlSeconds: 30, labels: { who: 'b' }, env: { A: '1' } });
    expect(claimed).toMatchObject({ id: idle.id, fromPool: true, labels: { pool: 'p', who: 'b' } });
    expect(Date.parse(claimed!.leaseExpiresAt)).toBe(clock.now() + 30_000);
    expect(lifecycle.record(idle.id).execEnv).toEqual({ A: '1' });
    expect(lifecycle.list({ labels: { who: 'b' } }).map((sandbox) => sandbox.id)).toEqual([idle.id]);
    // Claimed already: a second claim gets nothing.
    expect(await lifecycle.claim(idle.id, { ttlSeconds: 30, labels: {}, env: {} })).toBeNull();
  });
});

describe('SandboxOperations', () => {
  it("runs a session command one-shot without sessions, under the claim's env, and renews the lease", async () => {
    const { lifecycle, operations, provider, advance, clock } = await wire({
      capabilities: { sessions: false },
    });
    const spec = SandboxSpecSchema.parse({ image: 'img', ttlSeconds: 100 });
    const idle = (await lifecycle.createIdle(spec, 'p', 100))!;
    await lifecycle.claim(idle.id, { ttlSeconds: 100, labels: {}, env: { A: 'pool', B: 'pool' } });
    advance(50);
    const result = await operations.exec(
      idle.id,
      ExecRequestSchema.parse({ argv: ['env'], session: 'agent', env: { B: 'request' } }),
    );
    expect(result).toMatchObject({ status: 'ok', session: false });
    expect(provider.execs.at(-1)).toMatchObject({ argv: ['env'], env: { A: 'pool', B: 'request' } });
    expect(provider.execs.at(-1)).not.toHaveProperty('session');
    // Used 50 s into a 100 s lease: renewed from now.
    expect(Date.parse(lifecycle.get(idle.id).leaseExpiresAt)).toBe(clock.now() + 100_000);
  });

  it('forgets a sandbox whose exec says it is gone, and refuses what the provider lacks', async () => {
    const { lifecycle, operations, provider, store } = await wire({ capabilities: { snapshot: false } });
    const { id } = await lifecycle.create({ image: 'img' });
    expect(await operations.isHealthy(id)).toBe(true);
    await expect(operations.snapshot(id, 'gym-snapshot/x:1')).rejects.toMatchObject({
      code: 'CAPABILITY_UNSUPPORTED',
      details: { provider: 'memory', capability: 'snapshot' },
    });
    provider.goneOnNextExec = true;
    expect((await operations.exec(id, ExecRequestSchema.parse({ argv: ['true'] }))).status).toBe(
      'sandbox_gone',
    );
    await vi.waitFor(() => expect(store.get(id)).toBeUndefined());
    expect(await operations.isHealthy(id)).toBe(false);
    await expect(operations.exec(id, ExecRequestSchema.parse({ argv: ['true'] }))).rejects.toMatchObject({
      code: 'SANDBOX_NOT_FOUND',
    });
  });
});

describe('Reconciler', () => {
  it('adopts what it knows, destroys its own orphans and expired ones, forgets the gone, leaves others alone', async () => {
    const { lifecycle, reconciler, provider, store, advance } = await wire();
    const kept = await lifecycle.create({ image: 'img', ttlSeconds: 1000 });
    const expiring = await lifecycle.create({ image: 'img', ttlSeconds: 10 });
    const vanished = await lifecycle.create({ image: 'img', ttlSeconds: 1000 });
    // Made by this daemon but unknown to the store (a create whose record was lost): an orphan.
    const orphan = await provider.create(SandboxSpecSchema.parse({ image: 'img' }), { id: 'sbx-orphan' });
    // Another daemon's, well within its deadline: not ours to judge.
    const other = new MemoryProvider(testContext({ daemonId: 'daemon-other' }));
    const foreign = await other.create(SandboxSpecSchema.parse({ image: 'img' }), { id: 'sbx-foreign' });
    provider.sandboxes.set(foreign.id, foreign);
    provider.sandboxes.delete(vanished.id);
    advance(20);
    const summary = await reconciler.reconcile('memory');
    expect(summary).toEqual({ adopted: 1, destroyed: 2, forgotten: 1, unreachable: 0 });
    expect(store.all().map((record) => record.id)).toEqual([kept.id]);
    expect([...provider.sandboxes.keys()].sort()).toEqual([kept.id, foreign.id].sort());
    expect(provider.sandboxes.has(orphan.id)).toBe(false);
    expect(provider.sandboxes.has(expiring.id)).toBe(false);
  });

  it('keeps what a partial listing could not see as unreachable, and takes it back once seen', async () => {
    const { lifecycle, reconciler, provider, store } = await wire();
    const onA = await lifecycle.create({ image: 'img', providerOptions: { scope: 'host-a' } });
    const onB = await lifecycle.create({ image: 'img', providerOptions: { scope: 'host-b' } });
    provider.unreachable.set('host-a', 'connection refused');
    expect(await reconciler.reconcile('memory')).toMatchObject({ adopted: 1, forgotten: 0, unreachable: 1 });
    expect(lifecycle.get(onA.id).state).toBe('unreachable');
    expect(lifecycle.get(onB.id).state).toBe('ready');
    expect(store.get(onA.id)).toBeDefined();
    provider.unreachable.clear();
    expect(await reconciler.reconcile('memory')).toMatchObject({ adopted: 2, unreachable: 0 });
    expect(lifecycle.get(onA.id).state).toBe('ready');
  });
});

describe('GatewayReach', () => {
  it('records the URL a sandbox got, hands it back on the next call, and restores reach at it', async () => {
    const { lifecycle, operations, reconciler, provider, store } = await wire();
    const { id } = await lifecycle.create({ image: 'img' });
    const { url } = await operations.exposeGateway(id);
    expect(store.get(id)!.gatewayUrl).toBe(url);
    expect(await operations.exposeGateway(id)).toEqual({ url });
    expect(provider.exposed).toEqual([
      { id, url: undefined },
      { id, url },
    ]);
    // After a restart the daemon adopts it and asks for reach at the recorded URL.
    provider.exposed.length = 0;
    await reconciler.reconcile('memory');
    expect(provider.exposed).toEqual([{ id, url }]);
    // A provider that can only restore it elsewhere: the record follows.
    provider.movesOnRestore = true;
    await reconciler.reconcile('memory');
    expect(store.get(id)!.gatewayUrl).not.toBe(url);
    expect(store.get(id)!.gatewayUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/v1$/);
  });

  it('refuses without the capability or a gateway socket, and restores nothing then', async () => {
    const without = await wire({ capabilities: { gatewayReach: false } });
    const one = await without.lifecycle.create({ image: 'img' });
    await expect(without.operations.exposeGateway(one.id)).rejects.toMatchObject({
      code: 'CAPABILITY_UNSUPPORTED',
      details: { provider: 'memory', capability: 'gatewayReach' },
    });
    const unlistened = await wire({ socketPath: null });
    const two = await unlistened.lifecycle.create({ image: 'img' });
    await expect(unlistened.operations.exposeGateway(two.id)).rejects.toBeInstanceOf(GymError);
    await unlistened.store.put({ ...unlistened.store.get(two.id)!, gatewayUrl: 'http://127.0.0.1:4999/v1' });
    await unlistened.reconciler.reconcile('memory');
    expect(unlistened.provider.exposed).toEqual([]);
  });
});
