/**
 * What the API does with a sandbox once it exists: keepalive, exec, files, gateway reach,
 * stopping processes, snapshots, and the health probe pools use. Any use renews the lease, its
 * write overlapping the operation. Capability checks go through `../capabilities.ts`.
 */
import type { Readable } from 'node:stream';
import type { Sandbox, StopProcessesResult } from '../../core/schemas/api.ts';
import { type ExecRequest, ExecRequestSchema, type ExecResult } from '../../core/schemas/exec.ts';
import {
  type ToolchainCheckRequestInput,
  ToolchainCheckRequestSchema,
  type ToolchainCheckResult,
} from '../../core/schemas/toolchain.ts';
import { parseOrThrow } from '../../core/validate.ts';
import type { ExecOptions, FileContent, SandboxProvider } from '../../providers/sandbox-provider.ts';
import {
  requireSnapshot,
  requireStopProcesses,
  requireToolchainCheck,
  sessionOrOneShot,
} from '../capabilities.ts';
import type { DaemonMetrics } from '../metrics.ts';
import type { SandboxRecord, StateStore } from '../state-store.ts';
import type { GatewayReach } from './gateway-reach.ts';
import type { Leases } from './leases.ts';
import type { SandboxLifecycle } from './lifecycle.ts';
import type { SandboxNetwork } from './network.ts';

export class SandboxOperations {
  readonly #network: SandboxNetwork | undefined;
  readonly #lifecycle: SandboxLifecycle;
  readonly #leases: Leases;
  readonly #store: StateStore;
  readonly #gateway: GatewayReach;
  readonly #metrics: DaemonMetrics | undefined;

  constructor(options: {
    lifecycle: SandboxLifecycle;
    leases: Leases;
    store: StateStore;
    gateway: GatewayReach;
    metrics: DaemonMetrics | undefined;
    network?: SandboxNetwork;
  }) {
    this.#network = options.network;
    this.#lifecycle = options.lifecycle;
    this.#leases = options.leases;
    this.#store = options.store;
    this.#gateway = options.gateway;
    this.#metrics = options.metrics;
  }

  /** Renews the lease by `ttlSeconds` from now (default: the sandbox's own TTL), never past its deadline. */
  async keepalive(id: string, ttlSeconds?: number): Promise<Sandbox> {
    await this.#leases.renew(this.#lifecycle.record(id), ttlSeconds);
    return this.#lifecycle.get(id);
  }

  /** Runs the request, with the lease renewal's write overlapping the command. */
  async #use<T>(
    id: string,
    body: (provider: SandboxProvider, record: SandboxRecord) => Promise<T>,
  ): Promise<T> {
    const record = this.#lifecycle.record(id);
    const provider = this.#lifecycle.provider(record.provider);
    const [result] = await Promise.all([body(provider, record), this.#leases.touch(record)]);
    return result;
  }

  /** Runs a request the route has parsed already (`ExecRequestSchema`: once, at the edge). */
  async exec(id: string, request: ExecRequest, options: ExecOptions = {}): Promise<ExecResult> {
    return this.#use(id, async (provider, record) => {
      const { request: runnable, isSession } = sessionOrOneShot(provider, request);
      const started = performance.now();
      // The proxy's variables first: what the pool's acquire or the caller sets wins.
      const added = { ...this.#network?.environment(record), ...record.execEnv };
      const withEnv =
        Object.keys(added).length === 0 ? runnable : { ...runnable, env: { ...added, ...runnable.env } };
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
      if (result.status === 'sandbox_gone' || result.sandboxLost === true) {
        // The resource died under us (or of the command): forget it now rather than at the next scan.
        void this.#lifecycle.destroy(id, 'gone').catch(() => {});
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

  exposeGateway(id: string): Promise<{ url: string }> {
    return this.#use(id, (provider, record) => this.#gateway.expose(provider, record));
  }

  stopProcesses(id: string): Promise<StopProcessesResult> {
    return this.#use(id, async (provider, record) => {
      const result = await requireStopProcesses(record.provider, provider)(id);
      // Its processes resisted, and the provider killed it: forget it now, as after an exec.
      if (result.sandboxLost === true) void this.#lifecycle.destroy(id, 'gone').catch(() => {});
      return result;
    });
  }

  checkToolchain(id: string, input: ToolchainCheckRequestInput | unknown): Promise<ToolchainCheckResult> {
    const request = parseOrThrow(ToolchainCheckRequestSchema, input ?? {}, 'toolchain check request');
    return this.#use(id, (provider, record) => requireToolchainCheck(record.provider, provider)(id, request));
  }

  snapshot(id: string, image: string): Promise<{ image: string }> {
    return this.#use(id, (provider, record) => requireSnapshot(record.provider, provider)(id, { image }));
  }

  /** Whether a sandbox still answers: a trivial command through a session (well under a millisecond). */
  async isHealthy(id: string): Promise<boolean> {
    const record = this.#store.get(id);
    if (record === undefined) return false;
    const provider = this.#lifecycle.provider(record.provider);
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
}
