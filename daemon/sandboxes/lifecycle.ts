/**
 * The sandbox lifecycle: admission, create (for a request, or idle for a pool), pool claims,
 * the daemon's view of a sandbox, destroy and forget, and the removal events pools listen to.
 * Providers hold the resources; the state store holds the records; this keeps the two in
 * agreement for every create and destroy.
 */

import { type Clock, systemClock } from '../../core/clock.ts';
import { GymError } from '../../core/errors.ts';
import { createId } from '../../core/ids.ts';
import type { Logger } from '../../core/logger.ts';
import type { Sandbox } from '../../core/schemas/api.ts';
import { type SandboxSpec, SandboxSpecSchema } from '../../core/schemas/sandbox.ts';
import type { ServiceView } from '../../core/schemas/service.ts';
import { LINEAGE_LABELS, type SandboxLineage } from '../../core/schemas/snapshot.ts';
import { parseOrThrow } from '../../core/validate.ts';
import type { SandboxProvider } from '../../providers/sandbox-provider.ts';
import { sandboxTimes } from '../../providers/shared/sandbox-identity.ts';
import { Admission, type CreateSlot } from '../admission.ts';
import { requireSpecCapabilities } from '../capabilities.ts';
import type { DaemonConfig } from '../config.ts';
import type { DaemonMetrics } from '../metrics.ts';
import { applyResourceLimits } from '../resource-limits.ts';
import { requireUserLabels } from '../snapshots/labels.ts';
import type { SandboxRecord, StateStore } from '../state-store.ts';
import { forEachLimited, REAPER_CONCURRENCY } from './concurrency.ts';
import type { Leases } from './leases.ts';
import type { SandboxRuntime } from './runtime.ts';
import type { SandboxServices } from './services.ts';

/** What a new record says of its pool, lineage and exec environment. */
interface CreateMembership {
  pool: string | null;
  poolState: SandboxRecord['poolState'];
  lineage: SandboxRecord['lineage'];
  execEnv: Record<string, string>;
}

export interface ListOptions {
  labels?: Record<string, string>;
  provider?: string;
}

/** What a spec naming a snapshot (`snapshot:<id>`) is created as (`../snapshots/snapshots.ts`). */
export interface ResolvedImage {
  /** The image the provider creates the sandbox of. */
  image: string;
  /** Makes the new sandbox hold the snapshot's files, before it is recorded and handed out. */
  prepare?: (provider: SandboxProvider, sandboxId: string) => Promise<void>;
  /** A live snapshot's checkpoint: the provider starts the sandbox with its processes (`CreateOptions.restore`). */
  restore?: string;
  /** The create is done with the snapshot (made or failed). */
  release(): void;
}

/** Resolves `snapshot:<id>` images at create (the snapshot service); without one, images go to the provider as named. */
export interface SpecImageResolver {
  /** The provider a spec is made on: its own, else the snapshot's it names, else undefined (the default). */
  providerFor(spec: SandboxSpec): string | undefined;
  /** @throws GymError `SNAPSHOT_NOT_FOUND`, `VALIDATION_FAILED` (a snapshot of another provider). */
  check(spec: SandboxSpec, providerName: string): void;
  /** Null for an ordinary image. @throws as `check`. */
  resolve(spec: SandboxSpec, providerName: string): ResolvedImage | null;
}

/** Called after any sandbox record is removed (destroyed, reaped, found gone), with why. */
export type RemovalListener = (record: SandboxRecord, reason: string) => void;

export interface SandboxLifecycleOptions {
  config: DaemonConfig;
  providers: ReadonlyMap<string, SandboxProvider>;
  store: StateStore;
  runtime: SandboxRuntime;
  leases: Leases;
  metrics: DaemonMetrics | undefined;
  logger: Logger;
  /** The clock new sandboxes' times are read from; the system's when absent. */
  clock?: Clock;
}

export class SandboxLifecycle {
  readonly #config: DaemonConfig;
  readonly #providers: ReadonlyMap<string, SandboxProvider>;
  readonly #store: StateStore;
  readonly #runtime: SandboxRuntime;
  readonly #leases: Leases;
  readonly #metrics: DaemonMetrics | undefined;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #admissions = new Map<string, Admission>();
  readonly #removalListeners: RemovalListener[] = [];
  #images: SpecImageResolver | undefined;
  #services: SandboxServices | undefined;
  #isShuttingDown = false;
  /** Creates not yet settled, a pool's refills among them. */
  readonly #inFlight = new Set<Promise<SandboxRecord>>();

  constructor(options: SandboxLifecycleOptions) {
    this.#config = options.config;
    this.#providers = options.providers;
    this.#store = options.store;
    this.#runtime = options.runtime;
    this.#leases = options.leases;
    this.#metrics = options.metrics;
    this.#logger = options.logger;
    this.#clock = options.clock ?? systemClock;
    for (const provider of options.config.providers) {
      this.#admissions.set(provider.name, new Admission(provider.name, provider));
    }
  }

  /** From now on each create starts the spec's service and waits for its health check (set once, before the first create). */
  setServices(services: SandboxServices): void {
    this.#services = services;
  }

  /** From now on `snapshot:<id>` images resolve through `resolver` (set once, before the first create). */
  setImageResolver(resolver: SpecImageResolver): void {
    this.#images = resolver;
  }

  get providers(): ReadonlyMap<string, SandboxProvider> {
    return this.#providers;
  }

  get defaultProvider(): string {
    return this.#config.defaultProvider ?? this.#config.providers[0]!.name;
  }

  get isShuttingDown(): boolean {
    return this.#isShuttingDown;
  }

  /** From now on no sandbox is created (and the reaper stops). */
  beginShutdown(): void {
    this.#isShuttingDown = true;
  }

  /** Admission counts what the store holds (after reconcile). */
  syncLiveCounts(): void {
    for (const [name, admission] of this.#admissions) {
      admission.setLive(
        this.#store
          .all()
          .filter((record) => record.provider === name)
          .reduce((sum, record) => sum + admissionWeight(record.spec), 0),
      );
    }
  }

  provider(name: string): SandboxProvider {
    const provider = this.#providers.get(name);
    if (provider === undefined) {
      throw new GymError(
        'PROVIDER_NOT_FOUND',
        `no provider named "${name}" is configured; configured: ${[...this.#providers.keys()].join(', ')}`,
        {
          details: { provider: name, available: [...this.#providers.keys()] },
        },
      );
    }
    return provider;
  }

  view(record: SandboxRecord): Sandbox {
    return {
      id: record.id,
      provider: record.provider,
      state: this.#runtime.stateOf(record),
      image: record.spec.image,
      labels: record.spec.labels,
      pool: record.pool,
      createdAt: record.createdAt,
      leaseExpiresAt: new Date(this.#leases.expiresAtMs(record)).toISOString(),
      deadlineAt: record.deadlineAt,
      fromPool: record.fromPool,
      spec: record.spec,
      lineage: record.lineage,
      ...withService(this.#services?.view(record.id)),
    };
  }

  /** The record of a sandbox the API may use. @throws GymError `SANDBOX_NOT_FOUND`. */
  record(id: string): SandboxRecord {
    const record = this.#store.get(id);
    if (record === undefined || this.#runtime.destroying.has(id)) {
      throw new GymError(
        'SANDBOX_NOT_FOUND',
        `sandbox ${id} does not exist (destroyed, expired, or never created)`,
        {
          details: { sandboxId: id },
        },
      );
    }
    return record;
  }

  get(id: string): Sandbox {
    return this.view(this.record(id));
  }

  list(options: ListOptions = {}): Sandbox[] {
    return this.#store
      .all()
      .filter((record) => record.poolState !== 'idle')
      .filter((record) => options.provider === undefined || record.provider === options.provider)
      .filter((record) =>
        Object.entries(options.labels ?? {}).every(([key, value]) => record.spec.labels[key] === value),
      )
      .sort((left, right) => left.createdAt.localeCompare(right.createdAt) || left.id.localeCompare(right.id))
      .map((record) => this.view(record));
  }

  /**
   * Parses a spec as the API received it: the daemon's default TTL and resource limits apply
   * where it names none, and its limits must be within the configured maximum.
   */
  parseSpec(input: unknown): SandboxSpec {
    const withDefaults =
      typeof input === 'object' && input !== null && !('ttlSeconds' in input)
        ? { ...input, ttlSeconds: this.#config.defaultTtlSeconds }
        : input;
    return applyResourceLimits(parseOrThrow(SandboxSpecSchema, withDefaults, 'sandbox spec'), this.#config);
  }

  /**
   * Creates a sandbox for a request, waiting for admission; `pool` marks a pool's cold fallback,
   * `lineage` a fork's child (which gets the `gym.fork.*` labels), `execEnv` an environment
   * added to its execs only (a pool acquire's, never part of its spec). The spec's labels may not be
   * under `gym.` (reserved for those).
   * @throws GymError `VALIDATION_FAILED`, `SNAPSHOT_NOT_FOUND`, what admission and the provider throw.
   */
  async create(
    input: unknown,
    options: { pool?: string | null; lineage?: SandboxLineage; execEnv?: Record<string, string> } = {},
  ): Promise<Sandbox> {
    const parsed = this.parseSpec(input);
    requireUserLabels(parsed.labels, 'sandbox spec');
    const spec =
      options.lineage === undefined
        ? parsed
        : {
            ...parsed,
            labels: {
              ...parsed.labels,
              [LINEAGE_LABELS.parent]: options.lineage.parent,
              [LINEAGE_LABELS.snapshot]: options.lineage.snapshot,
              [LINEAGE_LABELS.forkIndex]: String(options.lineage.forkIndex),
            },
          };
    const providerName = this.#providerFor(spec);
    const slot = await this.#admissions.get(providerName)!.acquire(admissionWeight(spec));
    const record = await this.#createRecord(spec, providerName, slot, {
      pool: options.pool ?? null,
      poolState: options.pool ? 'leased' : null,
      lineage: options.lineage ?? null,
      execEnv: options.execEnv ?? {},
    });
    return this.view(record);
  }

  /**
   * Creates an idle pool member if there is room right now, without waiting and leaving room for
   * requests (refill must never starve them). Resolves null when there is no room.
   */
  async createIdle(spec: SandboxSpec, pool: string, idleTtlSeconds: number): Promise<SandboxRecord | null> {
    const providerName = this.#providerFor(spec);
    const slot = this.#admissions.get(providerName)!.tryAcquire(1, admissionWeight(spec));
    if (slot === null) return null;
    const limited = applyResourceLimits({ ...spec, ttlSeconds: idleTtlSeconds }, this.#config);
    return this.#createRecord(limited, providerName, slot, {
      pool,
      poolState: 'idle',
      lineage: null,
      execEnv: {},
    });
  }

  /**
   * Whether the spec's provider exists and can make what it asks for (before a pool is defined on it).
   * @throws GymError `PROVIDER_NOT_FOUND`, `CAPABILITY_UNSUPPORTED`.
   */
  checkSpec(spec: SandboxSpec): void {
    const providerName = this.#images?.providerFor(spec) ?? spec.provider ?? this.defaultProvider;
    requireSpecCapabilities(providerName, this.provider(providerName), spec);
    this.#images?.check(spec, providerName);
  }

  #providerFor(spec: SandboxSpec): string {
    if (this.#isShuttingDown)
      throw new GymError('SHUTTING_DOWN', 'the daemon is shutting down and creates no sandboxes');
    this.checkSpec(spec);
    return this.#images?.providerFor(spec) ?? spec.provider ?? this.defaultProvider;
  }

  /**
   * Creates and records a sandbox, held in `#inFlight` until it settles: shutdown waits for it
   * before it closes the providers and the store. A pool's refill is in flight with no request
   * behind it (draining the HTTP server does not wait for it); when it finished after the store
   * closed, its record failed and its destroy went to a closed provider, and the container was
   * left behind.
   */
  #createRecord(
    spec: SandboxSpec,
    providerName: string,
    slot: CreateSlot,
    membership: CreateMembership,
  ): Promise<SandboxRecord> {
    const creating = this.#createRecordNow(spec, providerName, slot, membership);
    this.#inFlight.add(creating);
    const forget = () => this.#inFlight.delete(creating);
    creating.then(forget, forget);
    return creating;
  }

  async #createRecordNow(
    spec: SandboxSpec,
    providerName: string,
    slot: CreateSlot,
    membership: CreateMembership,
  ): Promise<SandboxRecord> {
    const provider = this.provider(providerName);
    const id = createId('sbx');
    this.#runtime.creating.set(id, providerName);
    const started = performance.now();
    let resolved: ResolvedImage | null = null;
    try {
      resolved = this.#images?.resolve(spec, providerName) ?? null;
      const times = sandboxTimes(this.#clock, spec.ttlSeconds, this.#config.maxLifetimeSeconds);
      const info = await provider.create(
        { ...spec, provider: providerName, ...(resolved === null ? {} : { image: resolved.image }) },
        {
          id,
          times,
          pool: membership.pool,
          ...(resolved?.restore === undefined ? {} : { restore: resolved.restore }),
        },
      );
      if (resolved?.prepare !== undefined) {
        // Before the record: a crash here leaves an unrecorded resource, which reconcile destroys.
        try {
          await resolved.prepare(provider, id);
        } catch (error) {
          await provider.destroy(id).catch(() => {});
          throw error;
        }
      }
      try {
        await this.#services?.start(provider, id, spec);
      } catch (error) {
        this.#services?.forget(id);
        await provider.destroy(id).catch(() => {});
        throw error;
      }
      const record: SandboxRecord = {
        id,
        provider: providerName,
        // Seed files can be large and were written already: the record keeps only the spec's shape.
        spec: { ...spec, provider: providerName, files: [] },
        pool: info.pool,
        createdAt: info.createdAt,
        leaseExpiresAt: info.leaseExpiresAt,
        deadlineAt: info.deadlineAt,
        providerRef: info.providerRef,
        ...(info.scope === undefined ? {} : { scope: info.scope }),
        poolState: membership.poolState,
        fromPool: false,
        execEnv: membership.execEnv,
        gatewayUrl: null,
        egress: null,
        lineage: membership.lineage,
      };
      try {
        await this.#store.put(record);
      } catch (error) {
        await provider.destroy(id).catch(() => {});
        throw new GymError(
          'INTERNAL',
          `could not record sandbox ${id}; it was destroyed: ${(error as Error).message}`,
          {
            cause: error,
          },
        );
      }
      slot.succeeded();
      this.#metrics?.createSeconds.observe(
        { provider: providerName, outcome: 'ok' },
        (performance.now() - started) / 1000,
      );
      this.#logger.info(
        { sandboxId: id, provider: providerName, image: spec.image, pool: membership.pool },
        'sandbox created',
      );
      return record;
    } catch (error) {
      slot.failed();
      const code = error instanceof GymError ? error.code : 'INTERNAL';
      this.#metrics?.createSeconds.observe(
        { provider: providerName, outcome: code },
        (performance.now() - started) / 1000,
      );
      throw error;
    } finally {
      resolved?.release();
      this.#runtime.creating.delete(id);
    }
  }

  /**
   * Hands an idle pool member out: it becomes leased with a fresh lease, the request's labels and
   * an env applied to its execs. Returns null when the id is no longer idle (raced, or gone).
   */
  async claim(
    id: string,
    overrides: { ttlSeconds: number; labels: Record<string, string>; env: Record<string, string> },
  ): Promise<Sandbox | null> {
    const record = this.#store.get(id);
    if (record === undefined || record.poolState !== 'idle' || this.#runtime.destroying.has(id)) return null;
    const claimed: SandboxRecord = {
      ...record,
      poolState: 'leased',
      fromPool: true,
      spec: {
        ...record.spec,
        ttlSeconds: overrides.ttlSeconds,
        labels: { ...record.spec.labels, ...overrides.labels },
      },
      execEnv: overrides.env,
    };
    const leaseMs = this.#leases.renewed(claimed);
    claimed.leaseExpiresAt = new Date(leaseMs).toISOString();
    this.#leases.set(id, leaseMs);
    await this.#store.put(claimed);
    return this.view(claimed);
  }

  /** Records of pool members, for a pool to (re)adopt. */
  poolRecords(pool?: string): SandboxRecord[] {
    return this.#store
      .all()
      .filter((record) => record.pool !== null && (pool === undefined || record.pool === pool));
  }

  onRemoved(listener: RemovalListener): void {
    this.#removalListeners.push(listener);
  }

  #notifyRemoved(record: SandboxRecord, reason: string): void {
    for (const listener of this.#removalListeners) {
      try {
        listener(record, reason);
      } catch (error) {
        this.#logger.error({ error: String(error) }, 'a removal listener failed');
      }
    }
  }

  /** Destroys a sandbox. Idempotent: an unknown or already destroyed id is success. */
  async destroy(id: string, reason = 'request'): Promise<void> {
    const pending = this.#runtime.destroying.get(id);
    if (pending !== undefined) return this.#bounded(id, pending);
    const record = this.#store.get(id);
    if (record === undefined) return;
    const destroying = this.#destroyRecord(record, reason).finally(() => this.#runtime.destroying.delete(id));
    destroying.catch(() => {});
    this.#runtime.destroying.set(id, destroying);
    return this.#bounded(id, destroying);
  }

  /** A destroy as its caller sees it: at most `destroyWaitMs`, then PROVIDER_ERROR (it goes on). */
  async #bounded(id: string, destroying: Promise<void>): Promise<void> {
    const waitMs = this.#config.destroyWaitMs;
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<never>((_resolve, reject) => {
      timer = setTimeout(() => {
        this.#logger.warn({ sandboxId: id, waitMs }, 'a destroy is taking longer than destroyWaitMs');
        reject(
          new GymError('PROVIDER_ERROR', `the provider did not finish destroying ${id} within ${waitMs} ms`, {
            details: { sandboxId: id, waitMs, retryable: true },
          }),
        );
      }, waitMs);
      timer.unref();
    });
    try {
      await Promise.race([destroying, expired]);
    } finally {
      clearTimeout(timer);
    }
  }

  async #destroyRecord(record: SandboxRecord, reason: string): Promise<void> {
    const started = performance.now();
    await this.provider(record.provider).destroy(record.id);
    await this.#store.delete(record.id);
    this.#leases.forget(record.id);
    this.#runtime.unreachable.delete(record.id);
    this.#admissions.get(record.provider)?.released(admissionWeight(record.spec));
    this.#metrics?.destroySeconds.observe(
      { provider: record.provider },
      (performance.now() - started) / 1000,
    );
    if (reason !== 'request') this.#metrics?.reaped.inc({ reason });
    this.#logger.info({ sandboxId: record.id, provider: record.provider, reason }, 'sandbox destroyed');
    this.#notifyRemoved(record, reason);
  }

  /** Drops a record whose resource is gone (or past its deadline and out of reach), without the provider. */
  async forget(record: SandboxRecord, reason: string): Promise<void> {
    await this.#store.delete(record.id);
    this.#leases.forget(record.id);
    this.#runtime.unreachable.delete(record.id);
    this.#admissions.get(record.provider)?.released(admissionWeight(record.spec));
    this.#notifyRemoved(record, reason);
  }

  /** Waits for destroys in flight; with `destroy`, destroys every sandbox left (at shutdown). */
  async settle(options: { destroy: boolean }): Promise<void> {
    await Promise.allSettled(this.#inFlight);
    await Promise.allSettled(this.#runtime.destroying.values());
    if (!options.destroy) return;
    await forEachLimited(this.#store.all(), REAPER_CONCURRENCY, (record) =>
      this.#destroyRecord(record, 'shutdown').catch((error: unknown) =>
        this.#logger.warn(
          { sandboxId: record.id, error: String(error) },
          'could not destroy a sandbox at shutdown',
        ),
      ),
    );
  }

  byProviderAndState(): Array<{ provider: string; state: string; count: number }> {
    const counts = new Map<string, number>();
    const add = (provider: string, state: string) =>
      counts.set(`${provider}\0${state}`, (counts.get(`${provider}\0${state}`) ?? 0) + 1);
    for (const record of this.#store.all()) {
      const state = this.#runtime.stateOf(record);
      add(record.provider, state === 'ready' && record.poolState === 'idle' ? 'idle' : state);
    }
    for (const provider of this.#runtime.creating.values()) add(provider, 'creating');
    return [...counts].map(([key, count]) => {
      const [provider, state] = key.split('\0') as [string, string];
      return { provider, state, count };
    });
  }

  queued(): Array<{ provider: string; count: number }> {
    return [...this.#admissions].map(([provider, admission]) => ({ provider, count: admission.queued }));
  }
}

function withService(service: ServiceView | undefined): { service?: ServiceView } {
  return service === undefined ? {} : { service };
}

/** What a sandbox weighs against its provider's live limit: itself and each companion service. */
function admissionWeight(spec: Pick<SandboxSpec, 'services'>): number {
  return 1 + (spec.services?.length ?? 0);
}
