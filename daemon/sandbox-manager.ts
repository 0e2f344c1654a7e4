/**
 * The sandboxes behind the API, composed from parts that each do one thing (`sandboxes/`):
 * the lifecycle (admission, create, claim, destroy, removal events), leases, the operations on a
 * live sandbox, gateway reach, the reaper, and reconcile. This class wires them, runs the
 * periodic reaper and orphan scan, and shuts down; its methods are the API routes' and the
 * pools' single entry point.
 */
import type { Readable } from 'node:stream';
import type { Clock } from '../core/clock.ts';
import type { Logger } from '../core/logger.ts';
import type { Sandbox, StopProcessesResult } from '../core/schemas/api.ts';
import type { ExecRequestInput, ExecResult } from '../core/schemas/exec.ts';
import { networkPolicyOf, type SandboxSpec } from '../core/schemas/sandbox.ts';
import type { ToolchainCheckResult } from '../core/schemas/toolchain.ts';
import type { ExecOptions, FileContent, RelayStats, SandboxProvider } from '../providers/sandbox-provider.ts';
import type { DaemonConfig } from './config.ts';
import type { EgressAttempt } from './egress/log.ts';
import type { EgressProxy } from './egress/proxy.ts';
import type { DaemonMetrics, SandboxCounts } from './metrics.ts';
import type { OwnerLiveness } from './owners.ts';
import { GatewayReach } from './sandboxes/gateway-reach.ts';
import { Leases } from './sandboxes/leases.ts';
import { type ListOptions, type RemovalListener, SandboxLifecycle } from './sandboxes/lifecycle.ts';
import { type NetworkView, SandboxNetwork } from './sandboxes/network.ts';
import { SandboxOperations } from './sandboxes/operations.ts';
import { Reaper } from './sandboxes/reaper.ts';
import { Reconciler, type ReconcileSummary } from './sandboxes/reconcile.ts';
import { SandboxRuntime } from './sandboxes/runtime.ts';
import type { SandboxRecord, StateStore } from './state-store.ts';

export type { ListOptions } from './sandboxes/lifecycle.ts';
export type { ReconcileSummary } from './sandboxes/reconcile.ts';

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
  /** The egress proxy on the gateway socket; without it no sandbox gets a network policy but `none`. */
  egress?: EgressProxy;
}

export class SandboxManager implements SandboxCounts {
  readonly #config: DaemonConfig;
  readonly #providers: ReadonlyMap<string, SandboxProvider>;
  readonly #store: StateStore;
  readonly #logger: Logger;
  readonly #lifecycle: SandboxLifecycle;
  readonly #operations: SandboxOperations;
  readonly #network: SandboxNetwork;
  readonly #reaper: Reaper;
  readonly #reconciler: Reconciler;
  readonly #timers: NodeJS.Timeout[] = [];

  constructor(options: SandboxManagerOptions) {
    this.#config = options.config;
    this.#providers = options.providers;
    this.#store = options.store;
    this.#logger = options.logger;
    const { store, logger, clock, metrics } = options;
    const runtime = new SandboxRuntime();
    const leases = new Leases(store, clock);
    this.#lifecycle = new SandboxLifecycle({
      config: options.config,
      providers: options.providers,
      store,
      runtime,
      leases,
      metrics,
      logger,
      clock,
    });
    const gateway = new GatewayReach({ store, runtime, logger, socketPath: options.gatewaySocket });
    this.#network = new SandboxNetwork({ store, config: options.config.egress, proxy: options.egress });
    this.#lifecycle.onRemoved((record) => this.#network.forget(record.id));
    this.#operations = new SandboxOperations({
      lifecycle: this.#lifecycle,
      leases,
      store,
      gateway,
      metrics,
      network: this.#network,
    });
    this.#reaper = new Reaper({ store, runtime, leases, lifecycle: this.#lifecycle, clock, logger });
    this.#reconciler = new Reconciler({
      store,
      runtime,
      leases,
      lifecycle: this.#lifecycle,
      gateway,
      daemonId: options.daemonId,
      owners: options.owners,
      metrics,
      clock,
      logger,
    });
  }

  get defaultProvider(): string {
    return this.#lifecycle.defaultProvider;
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
    this.#lifecycle.syncLiveCounts();
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

  /** See `SandboxLifecycle.parseSpec`. */
  parseSpec(input: unknown): SandboxSpec {
    return this.#lifecycle.parseSpec(input);
  }

  /**
   * Creates a sandbox for a request, waiting for admission; `pool` marks a pool's cold fallback.
   * A spec whose `network` is a policy gets it before it is handed out (checked against the
   * operator's cap first: nothing is made for a policy that would be refused).
   */
  async create(input: unknown, options: { pool?: string | null } = {}): Promise<Sandbox> {
    const requested =
      typeof input === 'object' && input !== null && 'network' in input
        ? networkPolicyOf((input as { network: unknown }).network)
        : null;
    if (requested !== null) this.#network.check(requested);
    const sandbox = await this.#lifecycle.create(input, options);
    if (requested === null) return sandbox;
    try {
      await this.setNetwork(sandbox.id, requested);
    } catch (error) {
      await this.#lifecycle.destroy(sandbox.id, 'network-policy-failed').catch(() => {});
      throw error;
    }
    return this.#lifecycle.get(sandbox.id);
  }

  /** The sandbox's egress policy and proxy URL. @throws GymError `SANDBOX_NOT_FOUND`. */
  network(id: string): NetworkView {
    return this.#network.view(this.#lifecycle.record(id));
  }

  /**
   * Sets the sandbox's egress policy: new connections follow it, open ones are cut.
   * @throws GymError `SANDBOX_NOT_FOUND`, `VALIDATION_FAILED`, `FORBIDDEN_BY_CONFIG`,
   *   `CAPABILITY_UNSUPPORTED` (its provider has no gateway reach for the proxy to ride).
   */
  setNetwork(id: string, input: unknown): Promise<NetworkView> {
    return this.#network.set(this.#lifecycle.record(id), input, () => this.#operations.exposeGateway(id));
  }

  /** Every attempt through the proxy, oldest first, and how many older were dropped. */
  networkLog(id: string): { attempts: EgressAttempt[]; dropped: number } {
    return this.#network.log(this.#lifecycle.record(id));
  }

  /** Creates an idle pool member if there is room right now; null when there is none. */
  createIdle(spec: SandboxSpec, pool: string, idleTtlSeconds: number): Promise<SandboxRecord | null> {
    return this.#lifecycle.createIdle(spec, pool, idleTtlSeconds);
  }

  /**
   * Whether the spec's provider exists and can make what it asks for (before a pool is defined on it).
   * @throws GymError `PROVIDER_NOT_FOUND`, `CAPABILITY_UNSUPPORTED`.
   */
  checkSpec(spec: SandboxSpec): void {
    this.#lifecycle.checkSpec(spec);
  }

  /** Hands an idle pool member out; null when the id is no longer idle (raced, or gone). */
  claim(
    id: string,
    overrides: { ttlSeconds: number; labels: Record<string, string>; env: Record<string, string> },
  ): Promise<Sandbox | null> {
    return this.#lifecycle.claim(id, overrides);
  }

  /** Whether a sandbox still answers: a trivial command through a session (well under a millisecond). */
  isHealthy(id: string): Promise<boolean> {
    return this.#operations.isHealthy(id);
  }

  /** Records of pool members, for a pool to (re)adopt. */
  poolRecords(pool?: string): SandboxRecord[] {
    return this.#lifecycle.poolRecords(pool);
  }

  /** Called after any sandbox record is removed (destroyed, reaped, found gone). */
  onRemoved(listener: RemovalListener): void {
    this.#lifecycle.onRemoved(listener);
  }

  get(id: string): Sandbox {
    return this.#lifecycle.get(id);
  }

  list(options: ListOptions = {}): Sandbox[] {
    return this.#lifecycle.list(options);
  }

  /** Destroys a sandbox. Idempotent: an unknown or already destroyed id is success. */
  destroy(id: string, reason = 'request'): Promise<void> {
    return this.#lifecycle.destroy(id, reason);
  }

  /** Renews the lease by `ttlSeconds` from now (default: the sandbox's own TTL), never past its deadline. */
  keepalive(id: string, ttlSeconds?: number): Promise<Sandbox> {
    return this.#operations.keepalive(id, ttlSeconds);
  }

  exec(id: string, input: ExecRequestInput | unknown, options: ExecOptions = {}): Promise<ExecResult> {
    return this.#operations.exec(id, input, options);
  }

  writeFile(id: string, path: string, content: FileContent, mode?: number): Promise<void> {
    return this.#operations.writeFile(id, path, content, mode);
  }

  readFile(id: string, path: string): Promise<Readable> {
    return this.#operations.readFile(id, path);
  }

  writeArchive(id: string, directory: string, archive: Readable): Promise<void> {
    return this.#operations.writeArchive(id, directory, archive);
  }

  readArchive(id: string, directory: string): Promise<Readable> {
    return this.#operations.readArchive(id, directory);
  }

  /**
   * Makes the model gateway reachable from inside the sandbox and returns the URL its agent must
   * use (see `SandboxProvider.exposeGateway`); recorded with the sandbox and restored at the same
   * URL after a restart.
   * @throws GymError `CAPABILITY_UNSUPPORTED` when the provider cannot, or this daemon serves no
   *   gateway socket (it does not listen); what the provider throws.
   */
  exposeGateway(id: string): Promise<{ url: string }> {
    return this.#operations.exposeGateway(id);
  }

  /**
   * Kills every process in the sandbox but its keeper (see `SandboxProvider.stopProcesses`), so
   * that nothing an agent left running can touch what a verifier is about to judge.
   * @throws GymError `CAPABILITY_UNSUPPORTED` when the sandbox's provider cannot.
   */
  stopProcesses(id: string): Promise<StopProcessesResult> {
    return this.#operations.stopProcesses(id);
  }

  /**
   * Which files of the verifier's toolchain differ from the sandbox's image, seen from outside it
   * (see `SandboxProvider.checkToolchain`).
   * @throws GymError `CAPABILITY_UNSUPPORTED` when the sandbox's provider cannot, `VALIDATION_FAILED`.
   */
  checkToolchain(id: string, request: unknown): Promise<ToolchainCheckResult> {
    return this.#operations.checkToolchain(id, request);
  }

  snapshot(id: string, image: string): Promise<{ image: string }> {
    return this.#operations.snapshot(id, image);
  }

  /** Destroys sandboxes whose lease or deadline has passed. */
  reap(): Promise<void> {
    return this.#reaper.reap();
  }

  /** Brings the store and one provider into agreement (see `sandboxes/reconcile.ts`). */
  reconcile(providerName: string): Promise<ReconcileSummary> {
    return this.#reconciler.reconcile(providerName);
  }

  byProviderAndState(): Array<{ provider: string; state: string; count: number }> {
    return this.#lifecycle.byProviderAndState();
  }

  queued(): Array<{ provider: string; count: number }> {
    return this.#lifecycle.queued();
  }

  relays(): Array<{ provider: string } & RelayStats> {
    return [...this.#providers].flatMap(([provider, instance]) =>
      instance.relayStats === undefined ? [] : [{ provider, ...instance.relayStats() }],
    );
  }

  /** Stops the reaper; destroys every sandbox only when asked (the default keeps them for the next start). */
  async shutdown(options: { destroy: boolean }): Promise<void> {
    this.#lifecycle.beginShutdown();
    for (const timer of this.#timers) clearInterval(timer);
    await this.#lifecycle.settle(options);
    await Promise.allSettled([...this.#providers.values()].map((provider) => provider.close()));
    await this.#store.close();
  }
}
