/**
 * Prometheus metrics, on a registry owned by one daemon (no process-wide default registry, so
 * tests can build as many daemons as they like).
 */
import { Counter, Gauge, Histogram, Registry } from 'prom-client';

/** Buckets from 0.5 ms to 2 min: session exec sits at the bottom, cold creates of big images at the top. */
const LATENCY_BUCKETS_SECONDS = [
  0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 120,
];

export interface PoolCounts {
  poolCounts(): Array<{ pool: string; idle: number; leased: number; creating: number }>;
}

export interface SandboxCounts {
  /** provider -> state -> count */
  byProviderAndState(): Array<{ provider: string; state: string; count: number }>;
  queued(): Array<{ provider: string; count: number }>;
}

export interface RelayCounts {
  /** What each provider's gateway relays hold (providers without relays are absent). */
  relays(): Array<{ provider: string; listeners: number; connections: number; refusedTotal: number }>;
}

export class DaemonMetrics {
  readonly registry = new Registry();
  readonly createSeconds: Histogram<'provider' | 'outcome'>;
  readonly execSeconds: Histogram<'provider' | 'mode' | 'status'>;
  readonly destroySeconds: Histogram<'provider'>;
  readonly errors: Counter<'code'>;
  readonly reaped: Counter<'reason'>;
  readonly poolAcquireSeconds: Histogram<'pool' | 'outcome'>;

  /**
   * The instruments the manager and the pools record into. The gauges of what they hold are
   * added once both exist (`registerCountGauges`), so nothing here depends on them.
   */
  constructor() {
    const registers = [this.registry];
    this.createSeconds = new Histogram({
      name: 'gym_sandbox_create_seconds',
      help: 'Time to create a ready sandbox, by outcome (ok or an error code).',
      labelNames: ['provider', 'outcome'],
      buckets: LATENCY_BUCKETS_SECONDS,
      registers,
    });
    this.execSeconds = new Histogram({
      name: 'gym_exec_seconds',
      help: 'Time to run one command, by exec mode (session or one-shot) and result status.',
      labelNames: ['provider', 'mode', 'status'],
      buckets: LATENCY_BUCKETS_SECONDS,
      registers,
    });
    this.destroySeconds = new Histogram({
      name: 'gym_sandbox_destroy_seconds',
      help: 'Time to destroy a sandbox.',
      labelNames: ['provider'],
      buckets: LATENCY_BUCKETS_SECONDS,
      registers,
    });
    this.errors = new Counter({
      name: 'gym_api_errors_total',
      help: 'API errors by code.',
      labelNames: ['code'],
      registers,
    });
    this.reaped = new Counter({
      name: 'gym_sandboxes_reaped_total',
      help: 'Sandboxes destroyed by the daemon itself: lease expired, deadline passed, orphan, or not adoptable at start.',
      labelNames: ['reason'],
      registers,
    });
    this.poolAcquireSeconds = new Histogram({
      name: 'gym_pool_acquire_seconds',
      help: 'Time to acquire a sandbox from a pool (in the daemon), by outcome: hit (warm) or miss (cold fallback).',
      labelNames: ['pool', 'outcome'],
      buckets: LATENCY_BUCKETS_SECONDS,
      registers,
    });
    new Gauge({
      name: 'gym_process_memory_bytes',
      help: "The daemon process's memory by kind (process.memoryUsage): rss, heap_used, heap_total, external, array_buffers. A leak raises heap_used's floor; rss also holds what the allocator keeps.",
      labelNames: ['kind'],
      registers,
      collect() {
        const usage = process.memoryUsage();
        this.set({ kind: 'rss' }, usage.rss);
        this.set({ kind: 'heap_used' }, usage.heapUsed);
        this.set({ kind: 'heap_total' }, usage.heapTotal);
        this.set({ kind: 'external' }, usage.external);
        this.set({ kind: 'array_buffers' }, usage.arrayBuffers);
      },
    });
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }
}

/** Gauges of what the sandboxes and the pools hold, read at each scrape. */
export function registerCountGauges(
  metrics: DaemonMetrics,
  sources: { sandboxes: SandboxCounts; relays?: RelayCounts; pools: PoolCounts },
): void {
  const registers = [metrics.registry];
  new Gauge({
    name: 'gym_pool_sandboxes',
    help: 'Pool members by pool and state (idle, leased, creating).',
    labelNames: ['pool', 'state'],
    registers,
    collect() {
      this.reset();
      for (const { pool, ...counts } of sources.pools.poolCounts()) {
        for (const [state, count] of Object.entries(counts)) this.set({ pool, state }, count);
      }
    },
  });
  new Gauge({
    name: 'gym_sandboxes',
    help: 'Sandboxes the daemon manages, by provider and state.',
    labelNames: ['provider', 'state'],
    registers,
    collect() {
      this.reset();
      for (const { provider, state, count } of sources.sandboxes.byProviderAndState())
        this.set({ provider, state }, count);
    },
  });
  new Gauge({
    name: 'gym_gateway_relay_connections',
    help: 'Connections open through the gateway relays into sandboxes, by provider (each costs two sockets in the daemon, no process).',
    labelNames: ['provider'],
    registers,
    collect() {
      this.reset();
      for (const { provider, connections } of sources.relays?.relays() ?? [])
        this.set({ provider }, connections);
    },
  });
  new Gauge({
    name: 'gym_gateway_relay_listeners',
    help: 'Ports listening for the gateway relay inside sandboxes, by provider (one descriptor each).',
    labelNames: ['provider'],
    registers,
    collect() {
      this.reset();
      for (const { provider, listeners } of sources.relays?.relays() ?? []) this.set({ provider }, listeners);
    },
  });
  new Counter({
    name: 'gym_gateway_relay_refused_total',
    help: 'Relay connections closed at once because their sandbox had its maximum open, by provider.',
    labelNames: ['provider'],
    registers,
    collect() {
      this.reset();
      for (const { provider, refusedTotal } of sources.relays?.relays() ?? [])
        this.inc({ provider }, refusedTotal);
    },
  });
  new Gauge({
    name: 'gym_create_queue_length',
    help: 'Creates waiting for admission, by provider.',
    labelNames: ['provider'],
    registers,
    collect() {
      this.reset();
      for (const { provider, count } of sources.sandboxes.queued()) this.set({ provider }, count);
    },
  });
}
