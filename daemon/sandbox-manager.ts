/**
 * The sandboxes behind the API, composed from parts that each do one thing (`sandboxes/`):
 * the lifecycle (admission, create, claim, destroy, removal events), leases, the operations on a
 * live sandbox, gateway reach, the reaper, and reconcile. This class wires them, runs the
 * periodic reaper and orphan scan, and shuts down; the API routes and the pools call the
 * lifecycle and the operations it exposes directly.
 */
import type { Clock } from '../core/clock.ts';
import type { Logger } from '../core/logger.ts';
import type { Sandbox } from '../core/schemas/api.ts';
import { networkPolicyOf } from '../core/schemas/sandbox.ts';
import type { RelayStats, SandboxProvider } from '../providers/sandbox-provider.ts';
import { requireEgressReach } from './capabilities.ts';
import type { DaemonConfig } from './config.ts';
import type { EgressAttempt } from './egress/log.ts';
import type { EgressProxy } from './egress/proxy.ts';
import type { GatewayArrivals } from './gateway/arrivals.ts';
import type { DaemonMetrics } from './metrics.ts';
import type { OwnerLiveness } from './owners.ts';
import { type PtyLimits, PtySessions } from './ptys/pty-sessions.ts';
import { GatewayReach } from './sandboxes/gateway-reach.ts';
import { Leases } from './sandboxes/leases.ts';
import { SandboxLifecycle } from './sandboxes/lifecycle.ts';
import { type NetworkView, SandboxNetwork } from './sandboxes/network.ts';
import { SandboxOperations } from './sandboxes/operations.ts';
import { SandboxPorts } from './sandboxes/ports.ts';
import { Reaper } from './sandboxes/reaper.ts';
import { Reconciler } from './sandboxes/reconcile.ts';
import { SandboxRuntime } from './sandboxes/runtime.ts';
import { SandboxServices } from './sandboxes/services.ts';
import { type ForkResult, forkSandbox } from './snapshots/fork.ts';
import type { SnapshotStore } from './snapshots/snapshot-store.ts';
import { SnapshotService } from './snapshots/snapshots.ts';
import type { StateStore } from './state-store.ts';

export interface SandboxManagerOptions {
  config: DaemonConfig;
  providers: ReadonlyMap<string, SandboxProvider>;
  store: StateStore;
  /** The managed snapshots' store (`snapshots/snapshot-store.ts`). */
  snapshotStore: SnapshotStore;
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
  /** Each sandbox's own socket to the gateway, which its relay is given (see GatewayReach). */
  gatewayArrivals?: GatewayArrivals;
  /** The egress proxy on the gateway socket; without it no sandbox gets a network policy but `none`. */
  egress?: EgressProxy;
  /** The secret each sandbox's port key is derived from (the API token); absent: a random one. */
  portKeySecret?: string;
  /** Terminal bounds (default `DEFAULT_PTY_LIMITS`). */
  ptyLimits?: Partial<PtyLimits>;
}

export class SandboxManager {
  /**
   * Admission, create, claim, get, list and destroy, and removal events: what the sandbox
   * routes, the pools and the count gauges call.
   */
  readonly lifecycle: SandboxLifecycle;
  /** Keepalive, exec, files, gateway reach, stopping processes, snapshots and the health probe. */
  readonly operations: SandboxOperations;
  /** Destroys sandboxes whose lease or deadline has passed (run periodically from `start`). */
  readonly reaper: Reaper;
  /** Brings the store and one provider into agreement (at `start`, then at each orphan scan). */
  readonly reconciler: Reconciler;
  /** Each sandbox's egress policy, its proxy credential and its log of attempts. */
  readonly network: ManagedNetwork;
  /** Declared ports: each sandbox's port relay and port key (`sandboxes/ports.ts`). */
  readonly ports: SandboxPorts;
  /** Each sandbox's service (its `entrypoint`) and health check (`sandboxes/services.ts`). */
  readonly services: SandboxServices;
  /** Managed snapshots: made, listed, removed, reaped, and resolved at create (`snapshot:<id>`). */
  readonly snapshots: SnapshotService;
  /** Terminals (PTY sessions) of the sandboxes; they end with their sandbox. */
  readonly ptys: PtySessions;
  readonly #config: DaemonConfig;
  readonly #providers: ReadonlyMap<string, SandboxProvider>;
  readonly #store: StateStore;
  readonly #snapshotStore: SnapshotStore;
  readonly #logger: Logger;
  readonly #timers: NodeJS.Timeout[] = [];

  constructor(options: SandboxManagerOptions) {
    this.#config = options.config;
    this.#providers = options.providers;
    this.#store = options.store;
    this.#snapshotStore = options.snapshotStore;
    this.#logger = options.logger;
    const { store, logger, clock, metrics } = options;
    const runtime = new SandboxRuntime();
    const leases = new Leases(store, clock);
    this.lifecycle = new SandboxLifecycle({
      config: options.config,
      providers: options.providers,
      store,
      runtime,
      leases,
      metrics,
      logger,
      clock,
    });
    this.snapshots = new SnapshotService({
      config: options.config,
      store: options.snapshotStore,
      lifecycle: this.lifecycle,
      clock,
      logger,
      touch: (record) => leases.touch(record),
    });
    this.lifecycle.setImageResolver(this.snapshots);
    const gateway = new GatewayReach({
      store,
      runtime,
      logger,
      socketPath: options.gatewaySocket,
      ...(options.gatewayArrivals === undefined ? {} : { arrivals: options.gatewayArrivals }),
    });
    const network = new SandboxNetwork({ store, config: options.config.egress, proxy: options.egress });
    this.services = new SandboxServices({ clock, logger });
    this.lifecycle.setServices(this.services);
    this.ports = new SandboxPorts({
      lifecycle: this.lifecycle,
      ...(options.portKeySecret === undefined ? {} : { secret: options.portKeySecret }),
    });
    this.ptys = new PtySessions({
      sandboxes: {
        record: (id) => this.lifecycle.record(id),
        provider: (name) => this.lifecycle.provider(name),
        touch: (record) => leases.touch(record),
      },
      logger,
      ...(options.ptyLimits === undefined ? {} : { limits: options.ptyLimits }),
    });
    this.lifecycle.onRemoved((record) => {
      network.forget(record.id);
      gateway.forget(record.id);
      this.ports.forget(record.id);
      this.services.forget(record.id);
      this.ptys.forget(record.id);
    });
    this.operations = new SandboxOperations({
      lifecycle: this.lifecycle,
      leases,
      store,
      gateway,
      metrics,
      network,
    });
    this.network = new ManagedNetwork(network, this.lifecycle, this.operations);
    this.reaper = new Reaper({ store, runtime, leases, lifecycle: this.lifecycle, clock, logger });
    this.reconciler = new Reconciler({
      store,
      runtime,
      leases,
      lifecycle: this.lifecycle,
      gateway,
      daemonId: options.daemonId,
      owners: options.owners,
      metrics,
      clock,
      logger,
    });
  }

  get providers(): ReadonlyMap<string, SandboxProvider> {
    return this.#providers;
  }

  /**
   * Forks a sandbox: a snapshot of it now, then `count` children from it (`snapshots/fork.ts`).
   * @throws GymError as `forkSandbox`.
   */
  fork(id: string, input: unknown): Promise<ForkResult> {
    return forkSandbox(
      { lifecycle: this.lifecycle, snapshots: this.snapshots, logger: this.#logger },
      id,
      input,
    );
  }

  #reconcileSnapshots(): Promise<void> {
    return this.snapshots
      .reconcile()
      .then(() => undefined)
      .catch((error: unknown) => this.#logger.warn({ error: String(error) }, 'snapshot reconcile failed'));
  }

  /** Reconciles with every provider (adopting what is still leased), then starts the reaper. */
  async start(): Promise<void> {
    for (const name of this.#providers.keys()) {
      await this.reconciler
        .reconcile(name)
        .catch((error: unknown) =>
          this.#logger.error(
            { provider: name, error: String(error) },
            'reconcile failed; will retry on the next orphan scan',
          ),
        );
    }
    await this.#reconcileSnapshots();
    this.lifecycle.syncLiveCounts();
    const reaper = setInterval(() => {
      void this.reaper.reap();
      if (!this.lifecycle.isShuttingDown)
        void this.snapshots
          .reap()
          .catch((error: unknown) => this.#logger.warn({ error: String(error) }, 'snapshot reap failed'));
    }, this.#config.reaperIntervalMs);
    const scanner = setInterval(() => {
      void this.#reconcileSnapshots();
      for (const name of this.#providers.keys()) {
        this.reconciler
          .reconcile(name)
          .catch((error: unknown) =>
            this.#logger.warn({ provider: name, error: String(error) }, 'orphan scan failed'),
          );
      }
    }, this.#config.orphanScanIntervalMs);
    reaper.unref();
    scanner.unref();
    this.#timers.push(reaper, scanner);
  }

  /** What each provider's gateway relays hold (providers without relays are absent). */
  relays(): Array<{ provider: string } & RelayStats> {
    return [...this.#providers].flatMap(([provider, instance]) =>
      instance.relayStats === undefined ? [] : [{ provider, ...instance.relayStats() }],
    );
  }

  /** Stops the reaper; destroys every sandbox only when asked (the default keeps them for the next start). */
  async shutdown(options: { destroy: boolean }): Promise<void> {
    this.lifecycle.beginShutdown();
    for (const timer of this.#timers) clearInterval(timer);
    await this.ptys.closeAll();
    await this.lifecycle.settle(options);
    this.ports.closeAll();
    await Promise.allSettled([...this.#providers.values()].map((provider) => provider.close()));
    await this.#store.close();
    await this.#snapshotStore.close();
  }
}

/** The network routes' part of the daemon: a sandbox's egress policy, set at create or later. */
export class ManagedNetwork {
  readonly #network: SandboxNetwork;
  readonly #lifecycle: SandboxLifecycle;
  readonly #operations: SandboxOperations;

  constructor(network: SandboxNetwork, lifecycle: SandboxLifecycle, operations: SandboxOperations) {
    this.#network = network;
    this.#lifecycle = lifecycle;
    this.#operations = operations;
  }

  /**
   * Creates a sandbox for a request, waiting for admission. A spec whose `network` is a policy
   * gets it before it is handed out (checked against the operator's cap first: nothing is made
   * for a policy that would be refused).
   */
  async create(input: unknown): Promise<Sandbox> {
    const requested =
      typeof input === 'object' && input !== null && 'network' in input
        ? networkPolicyOf((input as { network: unknown }).network)
        : null;
    if (requested !== null) {
      this.#network.check(requested);
      if (requested.mode !== 'none') {
        const spec = this.#lifecycle.parseSpec(input);
        const providerName = spec.provider ?? this.#lifecycle.defaultProvider;
        requireEgressReach(providerName, this.#lifecycle.provider(providerName));
      }
    }
    const sandbox = await this.#lifecycle.create(input);
    if (requested === null) return sandbox;
    try {
      await this.set(sandbox.id, requested);
    } catch (error) {
      await this.#lifecycle.destroy(sandbox.id, 'network-policy-failed').catch(() => {});
      throw error;
    }
    return this.#lifecycle.get(sandbox.id);
  }

  /** The sandbox's egress policy and proxy URL. @throws GymError `SANDBOX_NOT_FOUND`. */
  view(id: string): NetworkView {
    return this.#network.view(this.#lifecycle.record(id));
  }

  /**
   * Sets the sandbox's egress policy: new connections follow it, open ones are cut.
   * @throws GymError `SANDBOX_NOT_FOUND`, `VALIDATION_FAILED`, `FORBIDDEN_BY_CONFIG`,
   *   `CAPABILITY_UNSUPPORTED` (its provider has no gateway reach for the proxy to ride).
   */
  set(id: string, input: unknown): Promise<NetworkView> {
    const record = this.#lifecycle.record(id);
    return this.#network.set(record, input, () => {
      requireEgressReach(record.provider, this.#lifecycle.provider(record.provider));
      return this.#operations.exposeGateway(id);
    });
  }

  /** Every attempt the sandbox made through the proxy, oldest first, and how many were dropped. */
  log(id: string): { attempts: EgressAttempt[]; dropped: number } {
    return this.#network.log(this.#lifecycle.record(id));
  }
}
