/**
 * One warm pool: ready sandboxes of one spec, kept between minIdle and maxIdle, the pool's own
 * members never above maxTotal. Acquire hands out an idle sandbox after a sub-millisecond health
 * check, or falls back to a cold create: it never fails for emptiness. Refill runs in the
 * background and only takes create slots no request is waiting for (see Admission.tryAcquire),
 * so a draining, refilling pool never starves the acquires it exists for.
 */
import type { Logger } from '../../core/logger.ts';
import type { Sandbox } from '../../core/schemas/api.ts';
import type { PoolDefinition, PoolStats } from '../../core/schemas/pool.ts';
import type { SandboxSpec } from '../../core/schemas/sandbox.ts';
import { percentile } from '../../core/stats.ts';
import type { DaemonMetrics } from '../metrics.ts';
import type { SandboxRecord } from '../state-store.ts';
import type { PoolSandboxes } from './pool-sandboxes.ts';

/** Acquire latencies kept for the percentiles in the stats. */
const LATENCY_WINDOW = 1024;
/** When admission has no room for a refill create, look again after this long. */
const REFILL_RETRY_MS = 250;
/** Refill failures back off exponentially from this, up to the maximum. */
const REFILL_BACKOFF_BASE_MS = 500;
const REFILL_BACKOFF_MAX_MS = 30_000;

export interface AcquireOverrides {
  ttlSeconds: number;
  labels: Record<string, string>;
  env: Record<string, string>;
}

export class Pool {
  readonly name: string;
  #definition: PoolDefinition;
  readonly #manager: PoolSandboxes;
  readonly #logger: Logger;
  readonly #metrics: DaemonMetrics | undefined;
  /** Ready and health-checked, oldest first (handed out first, so none idles until it rotates). */
  #idle: string[] = [];
  readonly #leased = new Set<string>();
  #creating = 0;
  /** Taken from idle and being checked or claimed: still the pool's, counted against maxTotal. */
  #handingOut = 0;
  #hits = 0;
  #misses = 0;
  #failures = 0;
  #discarded = 0;
  #rotated = 0;
  #lastError: string | null = null;
  readonly #latencies: Array<{ ms: number; isHit: boolean }> = [];
  #failureStreak = 0;
  #retryTimer: NodeJS.Timeout | null = null;
  #isDraining = false;

  constructor(
    name: string,
    definition: PoolDefinition,
    manager: PoolSandboxes,
    logger: Logger,
    metrics?: DaemonMetrics,
  ) {
    this.name = name;
    this.#definition = definition;
    this.#manager = manager;
    this.#logger = logger.child({ pool: name });
    this.#metrics = metrics;
  }

  get definition(): PoolDefinition {
    return this.#definition;
  }

  get counts(): { idle: number; leased: number; creating: number } {
    return {
      idle: this.#idle.length,
      leased: this.#leased.size + this.#handingOut,
      creating: this.#creating,
    };
  }

  /** Takes back a member found in the store at start (idle ones wait again, leased ones keep their lease). */
  adopt(record: SandboxRecord): void {
    if (record.poolState === 'idle') this.#idle.push(record.id);
    else this.#leased.add(record.id);
  }

  /** Replaces the definition; idle members of an older spec are destroyed and refilled anew. */
  redefine(definition: PoolDefinition): void {
    const isSpecChanged = JSON.stringify(definition.spec) !== JSON.stringify(this.#definition.spec);
    this.#definition = definition;
    if (isSpecChanged) {
      const stale = this.#idle;
      this.#idle = [];
      for (const id of stale) void this.#manager.lifecycle.destroy(id, 'redefined').catch(() => {});
    }
    this.refill();
  }

  async acquire(overrides: AcquireOverrides): Promise<Sandbox> {
    const started = performance.now();
    while (this.#idle.length > 0) {
      const id = this.#idle.shift()!;
      this.#handingOut += 1;
      const sandbox = await this.#handOut(id, overrides).finally(() => {
        this.#handingOut -= 1;
      });
      if (sandbox === null) continue;
      this.#hits += 1;
      this.#observe(started, true);
      this.refill();
      return sandbox;
    }
    this.#misses += 1;
    this.refill();
    // The acquire's env goes to its execs, as for a warm member: never into the spec (which a fork copies).
    const sandbox = await this.#manager.lifecycle.create(this.#coldSpec(overrides), {
      pool: this.name,
      execEnv: overrides.env,
    });
    this.#leased.add(sandbox.id);
    this.#observe(started, false);
    return sandbox;
  }

  /** Checks an idle member and claims it; a dead one is discarded. Null when it cannot be handed out. */
  async #handOut(id: string, overrides: AcquireOverrides): Promise<Sandbox | null> {
    if (!(await this.#manager.operations.isHealthy(id))) {
      this.#discarded += 1;
      this.#logger.warn({ sandboxId: id }, 'idle sandbox failed its health check; discarded');
      void this.#manager.lifecycle.destroy(id, 'unhealthy').catch(() => {});
      return null;
    }
    const sandbox = await this.#manager.lifecycle.claim(id, overrides);
    if (sandbox !== null) this.#leased.add(id);
    return sandbox;
  }

  #coldSpec(overrides: AcquireOverrides): SandboxSpec {
    const { spec } = this.#definition;
    return {
      ...spec,
      ttlSeconds: overrides.ttlSeconds,
      labels: { ...spec.labels, ...overrides.labels },
    };
  }

  #observe(started: number, isHit: boolean): void {
    const ms = performance.now() - started;
    this.#latencies.push({ ms, isHit });
    if (this.#latencies.length > LATENCY_WINDOW) this.#latencies.shift();
    this.#metrics?.poolAcquireSeconds.observe(
      { pool: this.name, outcome: isHit ? 'hit' : 'miss' },
      ms / 1000,
    );
  }

  /** A member's record is gone (released, reaped, rotated, found dead): forget it and refill. */
  removed(record: SandboxRecord, reason: string): void {
    const index = this.#idle.indexOf(record.id);
    if (index !== -1) this.#idle.splice(index, 1);
    this.#leased.delete(record.id);
    if (record.poolState === 'idle' && reason === 'expired') this.#rotated += 1;
    this.refill();
  }

  /** Starts refill creates toward minIdle, within maxIdle, maxTotal and refillConcurrency. Never waits. */
  refill(): void {
    if (this.#isDraining || this.#retryTimer !== null) return;
    const { minIdle, maxIdle, maxTotal, refillConcurrency, spec, idleTtlSeconds } = this.#definition;
    const target = Math.min(minIdle, maxIdle);
    while (
      this.#creating < refillConcurrency &&
      this.#idle.length + this.#creating < target &&
      this.#idle.length + this.#leased.size + this.#creating + this.#handingOut < maxTotal
    ) {
      this.#creating += 1;
      this.#manager.lifecycle
        .createIdle(spec, this.name, idleTtlSeconds)
        .then(async (record) => {
          if (record === null) {
            this.#creating -= 1;
            this.#retryLater(REFILL_RETRY_MS);
            return;
          }
          // Warm the health-check session now, so the first acquire pays well under a millisecond.
          const isHealthy = await this.#manager.operations.isHealthy(record.id);
          this.#creating -= 1;
          if (this.#isDraining || !isHealthy) {
            if (!isHealthy) this.#noteFailure(`new sandbox ${record.id} failed its first health check`);
            void this.#manager.lifecycle
              .destroy(record.id, this.#isDraining ? 'drained' : 'unhealthy')
              .catch(() => {});
            return;
          }
          this.#failureStreak = 0;
          this.#idle.push(record.id);
          this.refill();
        })
        .catch((error: unknown) => {
          this.#creating -= 1;
          this.#noteFailure(error instanceof Error ? error.message : String(error));
        });
    }
  }

  #noteFailure(message: string): void {
    this.#failures += 1;
    this.#failureStreak += 1;
    this.#lastError = message;
    const delay = Math.min(REFILL_BACKOFF_MAX_MS, REFILL_BACKOFF_BASE_MS * 2 ** (this.#failureStreak - 1));
    this.#logger.warn({ error: message, retryInMs: delay }, 'pool refill failed');
    this.#retryLater(delay);
  }

  #retryLater(delayMs: number): void {
    if (this.#retryTimer !== null || this.#isDraining) return;
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = null;
      this.refill();
    }, delayMs);
    this.#retryTimer.unref();
  }

  /** Stops refilling and destroys the idle members; leased ones live out their leases. */
  async drain(): Promise<void> {
    this.#isDraining = true;
    if (this.#retryTimer !== null) clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
    const idle = this.#idle;
    this.#idle = [];
    await Promise.all(idle.map((id) => this.#manager.lifecycle.destroy(id, 'drained').catch(() => {})));
  }

  /** Stops background work without destroying anything (daemon shutdown). */
  stop(): void {
    this.#isDraining = true;
    if (this.#retryTimer !== null) clearTimeout(this.#retryTimer);
    this.#retryTimer = null;
  }

  stats(): PoolStats {
    const all = this.#latencies.map((sample) => sample.ms);
    const hits = this.#latencies.filter((sample) => sample.isHit).map((sample) => sample.ms);
    const misses = this.#latencies.filter((sample) => !sample.isHit).map((sample) => sample.ms);
    const round = (value: number) => Math.round(value * 1000) / 1000;
    return {
      name: this.name,
      definition: this.#definition as unknown as Record<string, unknown>,
      ...this.counts,
      hits: this.#hits,
      misses: this.#misses,
      failures: this.#failures,
      discarded: this.#discarded,
      rotated: this.#rotated,
      acquireLatencyMs: {
        count: all.length,
        p50: round(percentile(all, 0.5)),
        p99: round(percentile(all, 0.99)),
        hitP50: round(percentile(hits, 0.5)),
        missP50: round(percentile(misses, 0.5)),
      },
      lastError: this.#lastError,
    };
  }
}
