/**
 * The composition root of the daemon: reads nothing from the environment itself (the CLI passes
 * a loaded config), wires the real dependencies together, reconciles, and listens.
 */

import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { FastifyBaseLogger, FastifyInstance } from 'fastify';
import { type Clock, systemClock } from '../core/clock.ts';
import { GymError } from '../core/errors.ts';
import type { Logger } from '../core/logger.ts';
import { VERSION } from '../core/version.ts';
import { ProviderRegistry } from '../providers/registry.ts';
import type { SandboxProvider } from '../providers/sandbox-provider.ts';
import { AccessGrants } from './access/grants.ts';
import { forgetRemovedSandboxes, lifecycleTargets } from './access/targets.ts';
import type { DaemonConfig } from './config.ts';
import { AddressGuard } from './egress/addresses.ts';
import { EgressCredentials } from './egress/credentials.ts';
import { EgressProxy, type Resolver } from './egress/proxy.ts';
import { GatewayArrivals } from './gateway/arrivals.ts';
import { ModelGateway } from './gateway/gateway.ts';
import { IdempotencyStore } from './idempotency/store.ts';
import {
  ensureStateDir,
  loadOrCreateDaemonId,
  loadOrCreateToken,
  lockStateDir,
  removeDaemonInfo,
  writeDaemonInfo,
} from './identity.ts';
import { ImageService } from './images.ts';
import { DaemonMetrics, registerCountGauges } from './metrics.ts';
import { defaultOwnersDirectory, ensureOwnersDirectory, OwnerRegistry } from './owners.ts';
import { PoolManager } from './pools/pool-manager.ts';
import { SandboxManager } from './sandbox-manager.ts';
import { buildGatewayServer, buildServer } from './server.ts';
import { SnapshotStore } from './snapshots/snapshot-store.ts';
import { StateStore } from './state-store.ts';
import { createDaemonTracing } from './telemetry/daemon-tracing.ts';

export interface RunningDaemon {
  app: FastifyInstance;
  manager: SandboxManager;
  pools: PoolManager;
  gateway: ModelGateway;
  /** What requests sent with an `Idempotency-Key` answered. */
  idempotency: IdempotencyStore;
  daemonId: string;
  token: string;
  /** `http://127.0.0.1:PORT`, or the unix socket path. */
  address: { url?: string; socket?: string };
  /** Drains in-flight requests, then stops; sandboxes are kept unless `destroy` (or the config) says otherwise. */
  stop(options?: { destroy?: boolean }): Promise<void>;
}

export interface StartDaemonOptions {
  config: DaemonConfig;
  logger: Logger & FastifyBaseLogger;
  clock?: Clock;
  registry?: ProviderRegistry;
  /** Serve HTTP (default) or only build the app (tests that use inject()). */
  listen?: boolean;
  /** How the egress proxy resolves names (default: the system's); tests map theirs to 127.0.0.x. */
  egressResolver?: Resolver;
}

/**
 * `<state>/providers/<name>/`, each level 0700 and owned by this user, like the state directory
 * itself (see `ProviderContext.stateDirectory`). The config allows only names that are one path
 * segment.
 */
async function ensureProviderStateDirectory(stateDir: string, name: string): Promise<string> {
  const providersDirectory = join(stateDir, 'providers');
  await ensureStateDir(providersDirectory);
  const directory = join(providersDirectory, name);
  await ensureStateDir(directory);
  return directory;
}

export async function startDaemon(options: StartDaemonOptions): Promise<RunningDaemon> {
  const { config } = options;
  await ensureStateDir(config.stateDir);
  // Before anything is opened: an owner registry other users could write is refused (owners.ts).
  await ensureOwnersDirectory(config.owners.directory ?? defaultOwnersDirectory());
  const unlock = await lockStateDir(config.stateDir);
  try {
    return await assemble(options, unlock);
  } catch (error) {
    await unlock();
    throw error;
  }
}

async function assemble(options: StartDaemonOptions, unlock: () => Promise<void>): Promise<RunningDaemon> {
  const { config, logger } = options;
  const clock = options.clock ?? systemClock;
  const [token, daemonId] = await Promise.all([
    loadOrCreateToken(config.stateDir),
    loadOrCreateDaemonId(config.stateDir),
  ]);
  const registry = options.registry ?? new ProviderRegistry();
  const providers = new Map<string, SandboxProvider>();
  for (const provider of config.providers) {
    const context = {
      namespace: config.namespace,
      daemonId,
      logger: logger.child({ provider: provider.name }),
      clock,
      maxLifetimeSeconds: config.maxLifetimeSeconds,
      stateDirectory: await ensureProviderStateDirectory(config.stateDir, provider.name),
    };
    providers.set(provider.name, await registry.create(provider, context));
  }
  const store = await StateStore.open(config.stateDir, logger);
  const snapshotStore = await SnapshotStore.open(config.stateDir, logger);
  const idempotency = await IdempotencyStore.open(
    config.stateDir,
    clock,
    logger.child({ component: 'idempotency' }),
  );
  // Announce this daemon before the first reconcile, so peers never take its sandboxes for a dead one's.
  const owners = new OwnerRegistry({
    daemonId,
    graceMs: config.owners.graceMs,
    pruneAfterMs: config.maxLifetimeSeconds * 1000 + config.owners.graceMs,
    clock,
    logger,
    ...(config.owners.directory === undefined ? {} : { directory: config.owners.directory }),
  });
  await owners.heartbeat();
  const heartbeat = setInterval(
    () =>
      void owners
        .heartbeat()
        .catch((error: unknown) => logger.warn({ error: String(error) }, 'owner heartbeat failed')),
    config.orphanScanIntervalMs,
  );
  heartbeat.unref();
  // Agents inside sandboxes reach the gateway through this socket (a provider carries their
  // connections to it, see exposeGateway): a unix socket crosses network namespaces where no TCP
  // address of the host would. It serves the model routes only, never the daemon's API. The
  // manager needs it before it starts: reconcile restores the reach of adopted sandboxes.
  const gatewaySocket = options.listen === false ? undefined : join(config.stateDir, 'gateway.sock');
  // Built in one direction: metrics, then the manager recording into them, then the pools on the
  // manager (which tells them of removals through onRemoved), then the gauges reading both.
  const metrics = new DaemonMetrics();
  // The egress proxy rides the gateway socket (so every provider's relay reaches it); which
  // sandbox asks is proven by a credential derived from the daemon's token, never by the socket.
  const egressGuard = new AddressGuard(config.egress.allowPrivateAddresses);
  // Each sandbox's relay joins its connections to a socket of the sandbox's own, which tells the
  // proxy which sandbox asks (a credential alone would travel with a fork's copy of the files).
  const gatewayArrivals =
    gatewaySocket === undefined
      ? undefined
      : new GatewayArrivals({
          directory: join(config.stateDir, 'gw'),
          logger: logger.child({ component: 'gateway' }),
        });
  const egress =
    gatewayArrivals === undefined
      ? undefined
      : new EgressProxy({
          config: config.egress,
          credentials: new EgressCredentials(token),
          arrivals: gatewayArrivals,
          guard: egressGuard,
          policyOf: (sandboxId) => {
            const record = store.get(sandboxId);
            return record === undefined ? undefined : (record.egress ?? { mode: 'none', allowedHosts: [] });
          },
          ...(options.egressResolver === undefined ? {} : { resolver: options.egressResolver }),
          logger: logger.child({ component: 'egress' }),
        });
  const manager = new SandboxManager({
    config,
    providers,
    store,
    snapshotStore,
    daemonId,
    owners,
    metrics,
    logger,
    clock,
    ...(gatewaySocket === undefined ? {} : { gatewaySocket }),
    ...(gatewayArrivals === undefined ? {} : { gatewayArrivals }),
    ...(egress === undefined ? {} : { egress }),
    portKeySecret: token,
  });
  // Sockets of sandboxes a killed daemon left; reconcile opens those of the adopted ones again.
  await gatewayArrivals?.clear();
  await manager.start();
  // After the first reconcile: grants read back lose the sandboxes it did not keep.
  const access = await AccessGrants.open({
    stateDir: config.stateDir,
    targets: lifecycleTargets(manager.lifecycle),
    clock,
    logger: logger.child({ component: 'access' }),
  });
  forgetRemovedSandboxes(manager.lifecycle, access);
  const pools = new PoolManager({ manager, stateDir: config.stateDir, logger, metrics });
  manager.snapshots.setPoolUsage((snapshotId) => pools.startingFrom(snapshotId));
  registerCountGauges(metrics, { sandboxes: manager.lifecycle, relays: manager, pools });
  await pools.start(config.pools);
  const gateway = new ModelGateway({
    stateDir: config.stateDir,
    logger,
    maxRetries: config.gateway.maxRetries,
    timeoutMs: config.gateway.timeoutMs,
    hopId: daemonId,
    maxRecordBytesPerRollout: config.gateway.maxRecordBytesPerRollout,
    allowRemoteImageUrls: config.gateway.allowRemoteImageUrls,
    ...(config.gateway.upstream === undefined ? {} : { upstream: config.gateway.upstream }),
  });
  const images = new ImageService({
    providers,
    defaultProvider: () => manager.lifecycle.defaultProvider,
    logger: logger.child({ component: 'images' }),
  });
  const tracing = await createDaemonTracing(config.telemetry);
  const app = await buildServer({
    manager,
    pools,
    gateway,
    images,
    metrics,
    token,
    access,
    idempotency,
    daemonId,
    version: VERSION,
    maxModelRequestBytes: config.gateway.maxRequestBytes,
    logger,
    ...(tracing === undefined ? {} : { tracing }),
  });
  // Bounded (the exporter's timeout): a collector that is down never holds a shutdown.
  const flushTraces = async () => {
    const report = await tracing?.tracing.shutdown();
    if (report !== undefined && report.dropped > 0)
      logger.warn({ ...report }, 'spans that never reached the trace collector');
  };

  const address: RunningDaemon['address'] = {};
  let gatewayApp: FastifyInstance | undefined;
  const shutdownQuietly = async () => {
    gatewayArrivals?.closeAll();
    pools.stop();
    await app.close().catch(() => {});
    await manager.shutdown({ destroy: false });
    clearInterval(heartbeat);
    await owners.remove().catch(() => {});
    await flushTraces();
  };
  if (options.listen !== false) {
    try {
      if (config.listen.socket !== undefined) {
        await rm(config.listen.socket, { force: true });
        await app.listen({ path: config.listen.socket });
        address.socket = config.listen.socket;
      } else {
        await app.listen({ host: config.listen.host, port: config.listen.port });
      }
    } catch (error) {
      await shutdownQuietly();
      const where = config.listen.socket ?? `${config.listen.host}:${config.listen.port}`;
      const code = (error as NodeJS.ErrnoException).code;
      throw new GymError(
        code === 'EADDRINUSE' ? 'DAEMON_CONFLICT' : 'INTERNAL',
        `cannot listen on ${where}: ${code ?? (error as Error).message}${code === 'EADDRINUSE' ? ' (another process uses it; pick another --port, or --port 0 for any free one)' : ''}`,
        { cause: error },
      );
    }
    if (gatewaySocket !== undefined) {
      await rm(gatewaySocket, { force: true });
      gatewayApp = await buildGatewayServer({
        gateway,
        metrics,
        maxModelRequestBytes: config.gateway.maxRequestBytes,
        logger,
        ...(tracing === undefined ? {} : { tracing }),
        ...(gatewayArrivals === undefined
          ? {}
          : { arrivedFrom: (socket: object) => gatewayArrivals.sandboxOf(socket) }),
      });
      egress?.attach(gatewayApp);
      gatewayArrivals?.serve(gatewayApp.server);
      try {
        await gatewayApp.listen({ path: gatewaySocket });
      } catch (error) {
        // Stop everything started so far: a half-started daemon would hold the API port and
        // keep reconciling with no gateway to offer.
        await gatewayApp.close().catch(() => {});
        await shutdownQuietly();
        throw new GymError(
          'INTERNAL',
          `cannot serve the gateway socket ${gatewaySocket}: ${(error as Error).message} (a unix socket path must be under 108 bytes; choose a shorter stateDir)`,
          { cause: error },
        );
      }
    }
    if (config.listen.socket === undefined) {
      const bound = app.server.address();
      const port = typeof bound === 'object' && bound !== null ? bound.port : config.listen.port;
      const host = config.listen.host.includes(':') ? `[${config.listen.host}]` : config.listen.host;
      address.url = `http://${host}:${port}`;
      egressGuard.addSelfPort(port);
      try {
        gateway.setSelfAddresses([{ host: config.listen.host, port }]);
      } catch (error) {
        await gatewayApp?.close().catch(() => {});
        await shutdownQuietly();
        throw error;
      }
    }
    await writeDaemonInfo(config.stateDir, {
      pid: process.pid,
      daemonId,
      ...address,
      startedAt: new Date(clock.now()).toISOString(),
      version: VERSION,
    });
    logger.info(
      { ...address, daemonId, stateDir: config.stateDir, sandboxes: store.size },
      'daemon listening',
    );
  }

  let stopping: Promise<void> | null = null;
  const stop = (stopOptions: { destroy?: boolean } = {}) => {
    stopping ??= (async () => {
      logger.info('daemon stopping: draining requests');
      gatewayArrivals?.closeAll();
      await gatewayApp?.close();
      await app.close();
      await idempotency.close();
      pools.stop();
      await manager.shutdown({ destroy: stopOptions.destroy ?? config.destroyOnShutdown });
      clearInterval(heartbeat);
      await owners.remove().catch(() => {});
      await flushTraces();
      if (options.listen !== false) {
        await removeDaemonInfo(config.stateDir);
        if (address.socket !== undefined) await rm(address.socket, { force: true });
      }
      await unlock();
      logger.info('daemon stopped');
    })();
    return stopping;
  };
  return { app, manager, pools, gateway, idempotency, daemonId, token, address, stop };
}
