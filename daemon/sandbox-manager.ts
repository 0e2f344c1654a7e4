/**
 * The sandbox lifecycle behind the API: admission, create, leases, use, destroy, the reaper, and
 * reconcile on start (adopt what is still leased, destroy the rest). Providers hold the
 * resources; the state store holds leases; this class keeps the two in agreement.
 */
import type { Readable } from 'node:stream';
import type { Clock } from '../core/clock.ts';
import { GymError } from '../core/errors.ts';
import { createId } from '../core/ids.ts';
import type { Logger } from '../core/logger.ts';
import type { Sandbox } from '../core/schemas/api.ts';
import { type ExecRequestInput, ExecRequestSchema, type ExecResult } from '../core/schemas/exec.ts';
import { type SandboxInfo, type SandboxSpec, SandboxSpecSchema } from '../core/schemas/sandbox.ts';
import { parseOrThrow } from '../core/validate.ts';
import type {
  ExecOptions,
  FileContent,
  RelayStats,
  SandboxListing,
  SandboxProvider,
} from '../providers/sandbox-provider.ts';
import { Admission, type CreateSlot } from './admission.ts';
import {
  requireGatewayReach,
  requireSnapshot,
  requireSpecCapabilities,
  requireStopProcesses,
  sessionOrOneShot,
} from './capabilities.ts';
import type { DaemonConfig } from './config.ts';
import type { DaemonMetrics, SandboxCounts } from './metrics.ts';
import type { OwnerLiveness } from './owners.ts';
import { applyResourceLimits } from './resource-limits.ts';
import type { SandboxRecord, StateStore } from './state-store.ts';

/** How many destroys the reaper runs at once: enough to keep up, few enough not to starve creates. */
const REAPER_CONCURRENCY = 8;
/**
 * A lease renewed by use is written to disk only when it moved by this share of its length (at
 * most a minute): a crash can cost at most that much of a lease, and a busy sandbox does not
 * fsync on every command.
 */
const LEASE_PERSIST_SHARE = 0.1;
const LEASE_PERSIST_MAX_MS = 60_000;

export interface SandboxManagerOptions {
  config: DaemonConfig;
  providers: ReadonlyMap<string, SandboxProvider>;
  store: StateStore;
  /** This daemon's id: resources labelled with another are never orphans of ours. */
  daemonId: string;
  /** Whether another daemon is provably gone; without it, others' resources wait for their deadline. */
  owners?: OwnerLiveness;
  metrics?: DaemonMetrics;
  logger: Logger;
  clock: Clock;
  /**
   * The unix socket serving the gateway's model routes, which `exposeGateway` hands providers;
   * without it (a daemon that does not listen) no sandbox gets gateway reach.
   */
  gatewaySocket?: string;
}

/** What one reconcile did, for logs and tests. */
export interface ReconcileSummary {
  /** Sandboxes of the provider kept as they are. */
  adopted: number;
  destroyed: number;
  /** Records whose resource the listing showed gone. */
  forgotten: number;
  /** Records of the provider now kept as unreachable (their part of the backend did not answer). */
  unreachable: number;
}

export interface ListOptions {
  labels?: Record<string, string>;
  provider?: string;
}

async function forEachLimited<T>(items: T[], limit: number, body: (item: T) => Promise<void>): Promise<void> {
  let next = 0;
  const workers = Array.from({ length: Math.min(limit, items.length) }, async () => {
    while (next < items.length) {
      const item = items[next++]!;
      await body(item);
    }
  });
  await Promise.all(workers);
}

export class SandboxManager implements SandboxCounts {
  readonly #config: DaemonConfig;
  readonly #providers: ReadonlyMap<string, SandboxProvider>;
  readonly #store: StateStore;
  readonly #daemonId: string;
  readonly #owners: OwnerLiveness | undefined;
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #gatewaySocket: string | undefined;
  readonly #admissions = new Map<string, Admission>();
  /** Ids being created (provider name), so scans do not take them for orphans. */
  readonly #creating = new Map<string, string>();
  readonly #destroying = new Map<string, Promise<void>>();
  /** The in-memory lease, ahead of the persisted one by at most the persist slack. */
  readonly #leaseMs = new Map<string, number>();
  /**
   * Sandboxes the last listing of their provider could not see (their part of the backend did not
   * answer), with why: kept, shown `unreachable`, until a listing sees them again or finds them
   * gone, or their deadline passes.
   */
  readonly #unreachable = new Map<string, string>();
  readonly #timers: NodeJS.Timeout[] = [];
  readonly #removalListeners: Array<(record: SandboxRecord, reason: string) => void> = [];
  #metrics: DaemonMetrics | undefined;
  #isShuttingDown = false;
  #isReaping = false;

  constructor(options: SandboxManagerOptions) {
    this.#config = options.config;
    this.#providers = options.providers;
    this.#store = options.store;
    this.#daemonId = options.daemonId;
    this.#owners = options.owners;
    this.#metrics = options.metrics;
    this.#logger = options.logger;
    this.#clock = options.clock;
    this.#gatewaySocket = options.gatewaySocket;
    for (const provider of options.config.providers) {
      this.#admissions.set(provider.name, new Admission(provider.name, provider));
    }
  }

  set metrics(metrics: DaemonMetrics) {
    this.#metrics = metrics;
  }

  get defaultProvider(): string {
    return this.#config.defaultProvider ?? this.#config.providers[0]!.name;
  }

  get providers(): ReadonlyMap<string, SandboxProvider> {
    return this.#providers;
  }

  /** Reconciles with every provider (adopting what is still leased), then starts the reaper. */
  async start(): Promise<void> {
    for (const name of this.#providers.keys()) {
      await this.reconcile(name).catch((error: unknown) =>
        this.#logger.error(
          { provider: name, error: String(error) },
          'reconcile failed; will retry on the next orphan scan',
        ),
      );
    }
    this.#syncLiveCounts();
    const reaper = setInterval(() => void this.reap(), this.#config.reaperIntervalMs);
    const scanner = setInterval(() => {
      for (const name of this.#providers.keys()) {
        this.reconcile(name).catch((error: unknown) =>
          this.#logger.warn({ provider: name, error: String(error) }, 'orphan scan failed'),
        );
      }
    }, this.#config.orphanScanIntervalMs);
    reaper.unref();
    scanner.unref();
    this.#timers.push(reaper, scanner);
  }

  #syncLiveCounts(): void {
    for (const [name, admission] of this.#admissions) {
      admission.setLive(this.#store.all().filter((record) => record.provider === name).length);
    }
  }

  #provider(name: string): SandboxProvider {
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

  #view(record: SandboxRecord): Sandbox {
    return {
      id: record.id,
      provider: record.provider,
      state: this.#destroying.has(record.id)
        ? 'destroying'
        : this.#unreachable.has(record.id)
          ? 'unreachable'
          : 'ready',
      image: record.spec.image,
      labels: record.spec.labels,
      pool: record.pool,
      createdAt: record.createdAt,
      leaseExpiresAt: new Date(
        this.#leaseMs.get(record.id) ?? Date.parse(record.leaseExpiresAt),
      ).toISOString(),
      deadlineAt: record.deadlineAt,
      fromPool: record.fromPool,
      spec: record.spec,
    };
  }

  #record(id: string): SandboxRecord {
    const record = this.#store.get(id);
    if (record === undefined || this.#destroying.has(id)) {
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

  /** Creates a sandbox for a request, waiting for admission; `pool` marks a pool's cold fallback. */
  async create(input: unknown, options: { pool?: string | null } = {}): Promise<Sandbox> {
    const spec = this.parseSpec(input);
    const providerName = this.#providerFor(spec);
    const slot = await this.#admissions.get(providerName)!.acquire();
    const record = await this.#createRecord(spec, providerName, slot, {
      pool: options.pool ?? null,
      poolState: options.pool ? 'leased' : null,
    });
    return this.#view(record);
  }

  /**
   * Creates an idle pool member if there is room right now, without waiting and leaving room for
   * requests (refill must never starve them). Resolves null when there is no room.
   */
  async createIdle(spec: SandboxSpec, pool: string, idleTtlSeconds: number): Promise<SandboxRecord | null> {
    const providerName = this.#providerFor(spec);
    const slot = this.#admissions.get(providerName)!.tryAcquire();
    if (slot === null) return null;
    const limited = applyResourceLimits({ ...spec, ttlSeconds: idleTtlSeconds }, this.#config);
    return this.#createRecord(limited, providerName, slot, {
      pool,
      poolState: 'idle',
    });
  }

  /**
   * Whether the spec's provider exists and can make what it asks for (before a pool is defined on it).
   * @throws GymError `PROVIDER_NOT_FOUND`, `CAPABILITY_UNSUPPORTED`.
   */
  checkSpec(spec: SandboxSpec): void {
    const providerName = spec.provider ?? this.defaultProvider;
    requireSpecCapabilities(providerName, this.#provider(providerName), spec);
  }

  #providerFor(spec: SandboxSpec): string {
    if (this.#isShuttingDown)
      throw new GymError('SHUTTING_DOWN', 'the daemon is shutting down and creates no sandboxes');
    this.checkSpec(spec);
    return spec.provider ?? this.defaultProvider;
  }

  async #createRecord(
    spec: SandboxSpec,
    providerName: string,
    slot: CreateSlot,
    membership: { pool: string | null; poolState: SandboxRecord['poolState'] },
  ): Promise<SandboxRecord> {
    const provider = this.#provider(providerName);
    const id = createId('sbx');
    this.#creating.set(id, providerName);
    const started = performance.now();
    try {
      const info = await provider.create({ ...spec, provider: providerName }, { id, pool: membership.pool });
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
        execEnv: {},
        gatewayUrl: null,
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
      this.#creating.delete(id);
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
    if (record === undefined || record.poolState !== 'idle' || this.#destroying.has(id)) return null;
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
    const leaseMs = this.#renewedLeaseMs(claimed);
    claimed.leaseExpiresAt = new Date(leaseMs).toISOString();
    this.#leaseMs.set(id, leaseMs);
    await this.#store.put(claimed);
    return this.#view(claimed);
  }

  /** Whether a sandbox still answers: a trivial command through a session (well under a millisecond). */
  async isHealthy(id: string): Promise<boolean> {
    const record = this.#store.get(id);
    if (record === undefined) return false;
    const provider = this.#provider(record.provider);
    const { request } = sessionOrOneShot(
      provider,
      parseOrThrow(
        ExecRequestSchema,
        { argv: ['true'], timeoutMs: 5_000, session: 'gym-health' },
        'health check',
      ),
    );
    const result = await provider.exec(id, request).catch(() => null);
    return result?.status === 'ok' && result.exitCode === 0;
  }

  /** Records of pool members, for a pool to (re)adopt. */
  poolRecords(pool?: string): SandboxRecord[] {
    return this.#store
      .all()
      .filter((record) => record.pool !== null && (pool === undefined || record.pool === pool));
  }

  /** Called after any sandbox record is removed (destroyed, reaped, found gone). */
  onRemoved(listener: (record: SandboxRecord, reason: string) => void): void {
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

  get(id: string): Sandbox {
    return this.#view(this.#record(id));
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
      .map((record) => this.#view(record));
  }

  /** Destroys a sandbox. Idempotent: an unknown or already destroyed id is success. */
  async destroy(id: string, reason = 'request'): Promise<void> {
    const pending = this.#destroying.get(id);
    if (pending !== undefined) return pending;
    const record = this.#store.get(id);
    if (record === undefined) return;
    const destroying = this.#destroyRecord(record, reason).finally(() => this.#destroying.delete(id));
    this.#destroying.set(id, destroying);
    return destroying;
  }

  async #destroyRecord(record: SandboxRecord, reason: string): Promise<void> {
    const started = performance.now();
    await this.#provider(record.provider).destroy(record.id);
    await this.#store.delete(record.id);
    this.#leaseMs.delete(record.id);
    this.#unreachable.delete(record.id);
    this.#admissions.get(record.provider)?.released();
    this.#metrics?.destroySeconds.observe(
      { provider: record.provider },
      (performance.now() - started) / 1000,
    );
    if (reason !== 'request') this.#metrics?.reaped.inc({ reason });
    this.#logger.info({ sandboxId: record.id, provider: record.provider, reason }, 'sandbox destroyed');
    this.#notifyRemoved(record, reason);
  }

  /** Renews the lease by `ttlSeconds` from now (default: the sandbox's own TTL), never past its deadline. */
  async keepalive(id: string, ttlSeconds?: number): Promise<Sandbox> {
    const record = this.#record(id);
    const leaseMs = this.#renewedLeaseMs(record, ttlSeconds);
    this.#leaseMs.set(id, leaseMs);
    await this.#store.renewLease(id, new Date(leaseMs).toISOString());
    return this.get(id);
  }

  #renewedLeaseMs(record: SandboxRecord, ttlSeconds = record.spec.ttlSeconds): number {
    return Math.min(this.#clock.now() + ttlSeconds * 1000, Date.parse(record.deadlineAt));
  }

  /** Any use renews the lease; it reaches the disk only when it moved by the persist slack. */
  async #touch(record: SandboxRecord): Promise<void> {
    const leaseMs = this.#renewedLeaseMs(record);
    this.#leaseMs.set(record.id, leaseMs);
    const slackMs = Math.min(record.spec.ttlSeconds * 1000 * LEASE_PERSIST_SHARE, LEASE_PERSIST_MAX_MS);
    const current = this.#store.get(record.id);
    if (current !== undefined && leaseMs - Date.parse(current.leaseExpiresAt) >= slackMs) {
      await this.#store.renewLease(current.id, new Date(leaseMs).toISOString());
    }
  }

  /** Runs the request, with the lease renewal's write overlapping the command. */
  async #use<T>(
    id: string,
    body: (provider: SandboxProvider, record: SandboxRecord) => Promise<T>,
  ): Promise<T> {
    const record = this.#record(id);
    const provider = this.#provider(record.provider);
    const [result] = await Promise.all([body(provider, record), this.#touch(record)]);
    return result;
  }

  async exec(id: string, input: ExecRequestInput | unknown, options: ExecOptions = {}): Promise<ExecResult> {
    const request = parseOrThrow(ExecRequestSchema, input, 'exec request');
    return this.#use(id, async (provider, record) => {
      const { request: runnable, isSession } = sessionOrOneShot(provider, request);
      const started = performance.now();
      const withEnv =
        Object.keys(record.execEnv).length === 0
          ? runnable
          : { ...runnable, env: { ...record.execEnv, ...runnable.env } };
      const ran = await provider.exec(id, withEnv, options);
      // Only a session asked for and not had is worth saying: the caller may rely on its speed.
      const result = request.session !== undefined && !isSession ? { ...ran, session: false as const } : ran;
      this.#metrics?.execSeconds.observe(
        {
          provider: record.provider,
          mode: isSession ? 'session' : 'one-shot',
          status: result.status,
        },
        (performance.now() - started) / 1000,
      );
      if (result.status === 'sandbox_gone') {
        // The resource died under us: forget it now rather than at the next scan.
        void this.destroy(id, 'gone').catch(() => {});
      }
      return result;
    });
  }

  writeFile(id: string, path: string, content: FileContent, mode?: number): Promise<void> {
    return this.#use(id, (provider) =>
      provider.writeFile(id, path, content, mode === undefined ? {} : { mode }),
    );
  }

  readFile(id: string, path: string): Promise<Readable> {
    return this.#use(id, (provider) => provider.readFile(id, path));
  }

  writeArchive(id: string, directory: string, archive: Readable): Promise<void> {
    return this.#use(id, (provider) => provider.writeArchive(id, directory, archive));
  }

  readArchive(id: string, directory: string): Promise<Readable> {
    return this.#use(id, (provider) => provider.readArchive(id, directory));
  }

  /**
   * Makes the model gateway reachable from inside the sandbox and returns the URL its agent must
   * use (see `SandboxProvider.exposeGateway`). The URL is recorded with the sandbox: a sandbox has
   * one gateway URL for its life, and a restarted daemon restores reach at it (see reconcile).
   * @throws GymError `CAPABILITY_UNSUPPORTED` when the provider cannot, or this daemon serves no
   *   gateway socket (it does not listen); what the provider throws.
   */
  exposeGateway(id: string): Promise<{ url: string }> {
    return this.#use(id, async (provider, record) => {
      const expose = requireGatewayReach(record.provider, provider);
      if (this.#gatewaySocket === undefined) {
        throw new GymError(
          'CAPABILITY_UNSUPPORTED',
          'this daemon serves no gateway socket (it is not listening)',
          {
            details: { capability: 'gatewayReach' },
          },
        );
      }
      const { url } = await expose(id, {
        socketPath: this.#gatewaySocket,
        ...(record.gatewayUrl === null ? {} : { url: record.gatewayUrl }),
      });
      await this.#recordGatewayUrl(id, url);
      return { url };
    });
  }

  async #recordGatewayUrl(id: string, url: string): Promise<void> {
    const current = this.#store.get(id);
    if (current !== undefined && current.gatewayUrl !== url)
      await this.#store.put({ ...current, gatewayUrl: url });
  }

  /**
   * Restores gateway reach for adopted sandboxes that had it, at the URL recorded: the agents
   * inside keep using that URL across a restart. Cheap when reach is up (the provider answers
   * from memory); one that fails is tried again on the next scan.
   */
  async #restoreGatewayReach(provider: SandboxProvider, adoptedIds: string[]): Promise<void> {
    const socketPath = this.#gatewaySocket;
    if (
      socketPath === undefined ||
      provider.exposeGateway === undefined ||
      !provider.capabilities.gatewayReach
    )
      return;
    const reachable = adoptedIds.flatMap((id) => {
      const record = this.#store.get(id);
      return record?.gatewayUrl == null || this.#destroying.has(id) ? [] : [{ id, url: record.gatewayUrl }];
    });
    await forEachLimited(reachable, REAPER_CONCURRENCY, async ({ id, url }) => {
      try {
        const restored = await provider.exposeGateway!(id, { socketPath, url });
        if (restored.url !== url) {
          this.#logger.warn(
            { sandboxId: id, url, restoredUrl: restored.url },
            'gateway reach came back at another URL',
          );
          await this.#recordGatewayUrl(id, restored.url);
        }
      } catch (error) {
        this.#logger.warn(
          { sandboxId: id, url, error: String(error) },
          'could not restore the gateway reach of an adopted sandbox; will retry on the next scan',
        );
      }
    });
  }

  /**
   * Kills every process in the sandbox but its keeper (see `SandboxProvider.stopProcesses`), so
   * that nothing an agent left running can touch what a verifier is about to judge.
   * @throws GymError `CAPABILITY_UNSUPPORTED` when the sandbox's provider cannot.
   */
  stopProcesses(id: string): Promise<{ killed: number }> {
    return this.#use(id, (provider, record) => requireStopProcesses(record.provider, provider)(id));
  }

  snapshot(id: string, image: string): Promise<{ image: string }> {
    return this.#use(id, (provider, record) => requireSnapshot(record.provider, provider)(id, { image }));
  }

  /** Destroys sandboxes whose lease or deadline has passed. */
  async reap(): Promise<void> {
    if (this.#isReaping || this.#isShuttingDown) return;
    this.#isReaping = true;
    try {
      const now = this.#clock.now();
      const expired = this.#store.all().filter((record) => {
        if (this.#destroying.has(record.id)) return false;
        const leaseMs = this.#leaseMs.get(record.id) ?? Date.parse(record.leaseExpiresAt);
        return leaseMs <= now || Date.parse(record.deadlineAt) <= now;
      });
      await forEachLimited(expired, REAPER_CONCURRENCY, async (record) => {
        if (this.#unreachable.has(record.id) && Date.parse(record.deadlineAt) <= now) {
          // Past its deadline any reaper may destroy it when its part answers again (ours takes it
          // for an orphan then): waiting for the backend would keep it forever.
          this.#logger.info(
            { sandboxId: record.id, provider: record.provider, reason: this.#unreachable.get(record.id) },
            'forgot an unreachable sandbox past its deadline',
          );
          return this.#forget(record, 'gone');
        }
        return this.destroy(record.id, 'expired').catch((error: unknown) =>
          this.#logger.warn(
            { sandboxId: record.id, error: String(error) },
            'could not reap an expired sandbox; will retry',
          ),
        );
      });
    } finally {
      this.#isReaping = false;
    }
  }

  /**
   * Brings the store and one provider into agreement: a labelled resource of this daemon that the
   * store does not know (or whose lease or deadline passed, or that is not running) is destroyed;
   * a record whose resource is gone is forgotten; everything else is adopted as it is. Another
   * daemon's resource is destroyed only past its hard deadline or when its owner is provably gone
   * (several daemons share one engine and namespace). A record the listing could not see (its
   * part of the backend did not answer, or the listing failed) is neither forgotten nor destroyed:
   * it is kept as unreachable (the reaper forgets it past its deadline).
   */
  async reconcile(providerName: string): Promise<ReconcileSummary> {
    const provider = this.#provider(providerName);
    // Only a record that existed before the listing was asked for can be missing from it: one
    // whose create finished while the listing was on its way is not in it, and is not gone.
    const knownBefore = new Set(this.#store.all().map((record) => record.id));
    const listing = await this.#listing(provider, providerName);
    const now = this.#clock.now();
    const seen = new Set<string>();
    const doomed: Array<{ id: string; reason: string }> = [];
    const isOwnerGone = new Map<string, Promise<boolean>>();
    const adoptedIds: string[] = [];
    let adopted = 0;
    for (const info of listing.sandboxes) {
      seen.add(info.id);
      if (this.#creating.has(info.id) || this.#destroying.has(info.id)) continue;
      const record = this.#store.get(info.id);
      // Created while the listing was on its way: the listing may show it half-made ('created',
      // not yet running). Its create decided its fate; the next scan sees it as it is.
      if (record !== undefined && !knownBefore.has(info.id)) continue;
      if (info.state === 'unreachable') {
        // Known to the provider (from its own records) but out of its reach: nothing to decide yet.
        if (record !== undefined) this.#unreachable.set(info.id, `provider ${providerName} cannot reach it`);
        continue;
      }
      this.#unreachable.delete(info.id);
      if (record === undefined && info.daemonId !== this.#daemonId) {
        const reason = await this.#foreignReason(info, now, isOwnerGone);
        if (reason !== null) doomed.push({ id: info.id, reason });
        continue;
      }
      const leaseMs =
        record === undefined ? 0 : (this.#leaseMs.get(info.id) ?? Date.parse(record.leaseExpiresAt));
      const reason =
        record === undefined
          ? 'orphan'
          : Date.parse(info.deadlineAt) <= now || leaseMs <= now
            ? 'expired'
            : info.state !== 'ready'
              ? 'dead'
              : null;
      if (reason === null) {
        adopted += 1;
        adoptedIds.push(info.id);
      } else doomed.push({ id: info.id, reason });
    }
    await forEachLimited(doomed, REAPER_CONCURRENCY, async ({ id, reason }) => {
      try {
        if (this.#store.get(id) !== undefined) await this.destroy(id, reason);
        else {
          await provider.destroy(id);
          this.#metrics?.reaped.inc({ reason });
        }
      } catch (error) {
        this.#logger.warn(
          { sandboxId: id, error: String(error) },
          'could not destroy a sandbox during reconcile',
        );
      }
    });
    const missing: SandboxRecord[] = [];
    let newlyUnreachable = 0;
    for (const record of this.#store.all()) {
      if (
        record.provider !== providerName ||
        seen.has(record.id) ||
        this.#destroying.has(record.id) ||
        !knownBefore.has(record.id)
      )
        continue;
      const hiddenBecause = listing.hiddenBecause(record);
      if (hiddenBecause === undefined) missing.push(record);
      else {
        if (!this.#unreachable.has(record.id)) newlyUnreachable += 1;
        this.#unreachable.set(record.id, hiddenBecause);
      }
    }
    for (const record of missing) await this.#forget(record, 'gone');
    await this.#restoreGatewayReach(provider, adoptedIds);
    const summary: ReconcileSummary = {
      adopted,
      destroyed: doomed.length,
      forgotten: missing.length,
      unreachable: this.#store
        .all()
        .filter((record) => record.provider === providerName && this.#unreachable.has(record.id)).length,
    };
    if (summary.destroyed + summary.forgotten + newlyUnreachable > 0)
      this.#logger.info({ provider: providerName, ...summary }, 'reconciled');
    return summary;
  }

  /**
   * The provider's listing, and why it could not see a record (undefined: it could, so a record
   * missing from it is gone). A provider that throws instead of naming the part it could not see
   * is taken to have seen nothing.
   */
  async #listing(
    provider: SandboxProvider,
    providerName: string,
  ): Promise<{ sandboxes: SandboxInfo[]; hiddenBecause: (record: SandboxRecord) => string | undefined }> {
    let listing: SandboxListing;
    try {
      listing = await provider.list();
    } catch (error) {
      const reason = `listing failed: ${error instanceof Error ? error.message : String(error)}`;
      this.#logger.warn(
        { provider: providerName, error: reason },
        'listing failed; keeping every sandbox of the provider',
      );
      return { sandboxes: [], hiddenBecause: () => reason };
    }
    const reasons = new Map(listing.unreachable.map((part) => [part.scope, `${part.scope}: ${part.reason}`]));
    // A sandbox of no scope lives on a backend of one part: any part unreachable hides it.
    const everyReason = reasons.size === 0 ? undefined : [...reasons.values()].join('; ');
    return {
      sandboxes: listing.sandboxes,
      hiddenBecause: (record) => (record.scope === undefined ? everyReason : reasons.get(record.scope)),
    };
  }

  /** Drops a record whose resource is gone (or past its deadline and out of reach), without the provider. */
  async #forget(record: SandboxRecord, reason: string): Promise<void> {
    await this.#store.delete(record.id);
    this.#leaseMs.delete(record.id);
    this.#unreachable.delete(record.id);
    this.#admissions.get(record.provider)?.released();
    this.#notifyRemoved(record, reason);
  }

  /** Why another daemon's resource may be destroyed now, or null: it may be live. */
  async #foreignReason(
    info: SandboxInfo,
    now: number,
    isOwnerGone: Map<string, Promise<boolean>>,
  ): Promise<string | null> {
    if (Date.parse(info.deadlineAt) <= now) return 'foreign-deadline';
    if (this.#owners === undefined || info.daemonId === '') return null;
    if (!isOwnerGone.has(info.daemonId)) {
      isOwnerGone.set(
        info.daemonId,
        this.#owners.isGone(info.daemonId).catch(() => false),
      );
    }
    return (await isOwnerGone.get(info.daemonId)) ? 'owner-gone' : null;
  }

  byProviderAndState(): Array<{ provider: string; state: string; count: number }> {
    const counts = new Map<string, number>();
    const add = (provider: string, state: string) =>
      counts.set(`${provider}\0${state}`, (counts.get(`${provider}\0${state}`) ?? 0) + 1);
    for (const record of this.#store.all()) {
      add(
        record.provider,
        this.#destroying.has(record.id)
          ? 'destroying'
          : this.#unreachable.has(record.id)
            ? 'unreachable'
            : record.poolState === 'idle'
              ? 'idle'
              : 'ready',
      );
    }
    for (const provider of this.#creating.values()) add(provider, 'creating');
    return [...counts].map(([key, count]) => {
      const [provider, state] = key.split('\0') as [string, string];
      return { provider, state, count };
    });
  }

  queued(): Array<{ provider: string; count: number }> {
    return [...this.#admissions].map(([provider, admission]) => ({ provider, count: admission.queued }));
  }

  relays(): Array<{ provider: string } & RelayStats> {
    return [...this.#providers].flatMap(([provider, instance]) =>
      instance.relayStats === undefined ? [] : [{ provider, ...instance.relayStats() }],
    );
  }

  /** Stops the reaper; destroys every sandbox only when asked (the default keeps them for the next start). */
  async shutdown(options: { destroy: boolean }): Promise<void> {
    this.#isShuttingDown = true;
    for (const timer of this.#timers) clearInterval(timer);
    await Promise.allSettled(this.#destroying.values());
    if (options.destroy) {
      await forEachLimited(this.#store.all(), REAPER_CONCURRENCY, (record) =>
        this.#destroyRecord(record, 'shutdown').catch((error: unknown) =>
          this.#logger.warn(
            { sandboxId: record.id, error: String(error) },
            'could not destroy a sandbox at shutdown',
          ),
        ),
      );
    }
    await Promise.allSettled([...this.#providers.values()].map((provider) => provider.close()));
    await this.#store.close();
  }
}
