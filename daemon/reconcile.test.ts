/**
 * Reconcile against a listing that could not see everything (a host or an engine that did not
 * answer): what it could not see is neither forgotten nor destroyed, but shown unreachable.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { Clock } from '../core/clock.ts';
import { GymError } from '../core/errors.ts';
import { silentLogger } from '../core/logger.ts';
import { SandboxSchema } from '../core/schemas/api.ts';
import { MemoryProvider, type MemoryProviderOptions } from '../test/fixtures/memory-provider.ts';
import { loadConfig } from './config.ts';
import { SandboxManager } from './sandbox-manager.ts';
import { SnapshotStore } from './snapshots/snapshot-store.ts';
import { StateStore } from './state-store.ts';

const DAEMON_ID = 'daemon-reconcile';
const TTL_SECONDS = 60;
const MAX_LIFETIME_SECONDS = 600;

interface Rig {
  manager: SandboxManager;
  provider: MemoryProvider;
  clock: Clock & { advanceSeconds(seconds: number): void };
  removed: Array<{ id: string; reason: string }>;
}

const cleanups: Array<() => Promise<void>> = [];
afterEach(async () => {
  for (const cleanup of cleanups.splice(0)) await cleanup();
});

async function rig(options: MemoryProviderOptions = {}): Promise<Rig> {
  const stateDir = await mkdtemp(join(tmpdir(), 'gym-reconcile-'));
  let nowMs = Date.parse('2026-01-01T00:00:00Z');
  const clock = {
    now: () => nowMs,
    monotonicMs: () => performance.now(),
    advanceSeconds: (seconds: number) => {
      nowMs += seconds * 1000;
    },
  };
  const config = await loadConfig({
    env: {},
    overrides: [{ stateDir, providers: [{ name: 'memory' }], maxLifetimeSeconds: MAX_LIFETIME_SECONDS }],
  });
  const provider = new MemoryProvider(
    {
      namespace: config.namespace,
      daemonId: DAEMON_ID,
      logger: silentLogger,
      clock,
      maxLifetimeSeconds: MAX_LIFETIME_SECONDS,
      stateDirectory: stateDir,
    },
    options,
  );
  const store = await StateStore.open(stateDir, silentLogger);
  const manager = new SandboxManager({
    config,
    providers: new Map([['memory', provider]]),
    store,
    snapshotStore: await SnapshotStore.open(stateDir, silentLogger),
    daemonId: DAEMON_ID,
    logger: silentLogger,
    clock,
  });
  const removed: Rig['removed'] = [];
  manager.lifecycle.onRemoved((record, reason) => removed.push({ id: record.id, reason }));
  cleanups.push(async () => {
    await manager.shutdown({ destroy: false });
    await rm(stateDir, { recursive: true, force: true });
  });
  return { manager, provider, clock, removed };
}

async function createOn(manager: SandboxManager, scope?: string) {
  return manager.lifecycle.create({
    image: 'busybox',
    ttlSeconds: TTL_SECONDS,
    ...(scope === undefined ? {} : { providerOptions: { scope } }),
  });
}

function codeOf(action: () => unknown): string | undefined {
  try {
    action();
    return undefined;
  } catch (error) {
    return error instanceof GymError ? error.code : String(error);
  }
}

describe('reconcile with a partial listing', () => {
  it('keeps a sandbox on a host that does not answer, shows it unreachable, and takes it back when the host answers', async () => {
    const { manager, provider, removed } = await rig();
    const onDownHost = await createOn(manager, 'host-a');
    const onLiveHost = await createOn(manager, 'host-b');
    const goneFromLiveHost = await createOn(manager, 'host-b');
    provider.unreachable.set('host-a', 'connect ECONNREFUSED');
    provider.sandboxes.delete(goneFromLiveHost.id);

    expect(await manager.reconciler.reconcile('memory')).toEqual({
      adopted: 1,
      destroyed: 0,
      forgotten: 1,
      unreachable: 1,
    });
    const shown = manager.lifecycle.get(onDownHost.id);
    expect(shown.state).toBe('unreachable');
    expect(SandboxSchema.parse(shown).state).toBe('unreachable');
    expect(manager.lifecycle.get(onLiveHost.id).state).toBe('ready');
    // One host down hides only its own sandboxes: what the live host lost is gone.
    expect(codeOf(() => manager.lifecycle.get(goneFromLiveHost.id))).toBe('SANDBOX_NOT_FOUND');
    expect(removed).toEqual([{ id: goneFromLiveHost.id, reason: 'gone' }]);
    expect(provider.sandboxes.has(onDownHost.id)).toBe(true);
    expect(manager.lifecycle.byProviderAndState()).toContainEqual({
      provider: 'memory',
      state: 'unreachable',
      count: 1,
    });

    provider.unreachable.delete('host-a');
    expect(await manager.reconciler.reconcile('memory')).toMatchObject({
      adopted: 2,
      forgotten: 0,
      unreachable: 0,
    });
    expect(manager.lifecycle.get(onDownHost.id).state).toBe('ready');
  });

  it('forgets a sandbox its host shows gone once the host answers again', async () => {
    const { manager, provider, removed } = await rig();
    const sandbox = await createOn(manager, 'host-a');
    provider.unreachable.set('host-a', 'timed out');
    await manager.reconciler.reconcile('memory');
    provider.sandboxes.delete(sandbox.id);
    await manager.reconciler.reconcile('memory');
    expect(manager.lifecycle.get(sandbox.id).state).toBe('unreachable');
    provider.unreachable.delete('host-a');
    expect(await manager.reconciler.reconcile('memory')).toMatchObject({ forgotten: 1, unreachable: 0 });
    expect(codeOf(() => manager.lifecycle.get(sandbox.id))).toBe('SANDBOX_NOT_FOUND');
    expect(removed).toEqual([{ id: sandbox.id, reason: 'gone' }]);
  });

  it('forgets an unreachable sandbox only past its deadline, and destroys it when it shows up again', async () => {
    const { manager, provider, clock, removed } = await rig();
    // No scope: a backend of one part, hidden whole by any unreachable part.
    const sandbox = await createOn(manager);
    provider.unreachable.set('engine', 'the engine cannot be reached');
    expect(await manager.reconciler.reconcile('memory')).toMatchObject({ forgotten: 0, unreachable: 1 });

    // Its lease passes: the reaper tries to destroy it, the backend does not answer, it is kept.
    clock.advanceSeconds(TTL_SECONDS * 2);
    await manager.reaper.reap();
    expect(manager.lifecycle.get(sandbox.id).state).toBe('unreachable');
    expect(removed).toEqual([]);

    clock.advanceSeconds(MAX_LIFETIME_SECONDS);
    await manager.reaper.reap();
    expect(codeOf(() => manager.lifecycle.get(sandbox.id))).toBe('SANDBOX_NOT_FOUND');
    expect(removed).toEqual([{ id: sandbox.id, reason: 'gone' }]);

    // The engine answers again: the forgotten sandbox is this daemon's orphan, and destroyed.
    provider.unreachable.clear();
    expect(await manager.reconciler.reconcile('memory')).toMatchObject({ destroyed: 1 });
    expect(provider.sandboxes.has(sandbox.id)).toBe(false);
  });

  it('keeps every sandbox when the listing throws instead of naming what it could not see', async () => {
    const { manager, provider } = await rig({ listError: new Error('socket hang up') });
    const first = await createOn(manager, 'host-a');
    const second = await createOn(manager);
    expect(await manager.reconciler.reconcile('memory')).toEqual({
      adopted: 0,
      destroyed: 0,
      forgotten: 0,
      unreachable: 2,
    });
    expect(manager.lifecycle.list().map((sandbox) => sandbox.state)).toEqual(['unreachable', 'unreachable']);
    expect(provider.sandboxes.has(first.id) && provider.sandboxes.has(second.id)).toBe(true);
  });
});

describe('reconcile racing a create', () => {
  it('does not forget a sandbox whose create finished while the listing was on its way', async () => {
    const { manager, provider, removed } = await rig();
    const list = provider.list.bind(provider);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    // The listing is taken before the create and answers after it, as a slow engine would.
    provider.list = async (filter) => {
      const listing = await list(filter);
      await gate;
      return listing;
    };
    const reconciling = manager.reconciler.reconcile('memory');
    const created = await createOn(manager);
    release();
    await reconciling;
    expect(manager.lifecycle.get(created.id).state).toBe('ready');
    expect(removed).toEqual([]);
  });
});

describe('reconcile racing a create, the other way', () => {
  it('does not destroy a sandbox the listing showed half-made while its create finished', async () => {
    const { manager, provider, removed } = await rig();
    const list = provider.list.bind(provider);
    let release!: () => void;
    const gate = new Promise<void>((resolve) => {
      release = resolve;
    });
    let createdId = '';
    // The listing sees the new sandbox before it runs ('creating'), and answers after the create.
    provider.list = async (filter) => {
      await gate;
      const listing = await list(filter);
      return {
        ...listing,
        sandboxes: listing.sandboxes.map((info) =>
          info.id === createdId ? { ...info, state: 'creating' as const } : info,
        ),
      };
    };
    const reconciling = manager.reconciler.reconcile('memory');
    createdId = (await createOn(manager)).id;
    release();
    await reconciling;
    expect(manager.lifecycle.get(createdId).state).toBe('ready');
    expect(removed).toEqual([]);
  });
});
