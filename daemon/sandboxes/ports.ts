/**
 * A sandbox's declared ports, reached by the caller through the daemon (`routes/ports.ts`): each
 * sandbox has one port relay (`providers/shared/port-relay.ts`), started at the first request and
 * closed when the sandbox is removed, and one port key, which the proxy route asks for instead of
 * the API token. The key is an HMAC of the sandbox id under a secret of the daemon (its token), so
 * it holds for that sandbox alone, is the same after a restart, and grants nothing else: not the
 * API, not another sandbox's ports, not the gateway.
 */
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import type { Duplex } from 'node:stream';
import { GymError } from '../../core/errors.ts';
import type { PortRelay } from '../../providers/shared/port-relay.ts';
import type { SandboxLifecycle } from './lifecycle.ts';

/** The header that carries a sandbox's port key; the proxy strips it before the service sees the request. */
export const PORT_KEY_HEADER = 'x-gym-port-key';

export class SandboxPorts {
  readonly #lifecycle: SandboxLifecycle;
  readonly #secret: string;
  /** Each sandbox's relay, or its start under way (one start at a time per sandbox). */
  readonly #relays = new Map<string, Promise<PortRelay>>();

  /** @param secret a secret of the daemon (its API token); without one, a random one (keys then end with the process). */
  constructor(options: { lifecycle: SandboxLifecycle; secret?: string }) {
    this.#lifecycle = options.lifecycle;
    this.#secret = options.secret ?? randomBytes(32).toString('hex');
  }

  keyFor(sandboxId: string): string {
    return createHmac('sha256', this.#secret).update(`sandbox-ports\0${sandboxId}`).digest('hex');
  }

  /** Whether `presented` is this sandbox's port key, compared in constant time. */
  isKeyOf(sandboxId: string, presented: string | undefined): boolean {
    if (presented === undefined || presented === '') return false;
    const given = Buffer.from(presented, 'utf8');
    const expected = Buffer.from(this.keyFor(sandboxId), 'utf8');
    return given.length === expected.length && timingSafeEqual(given, expected);
  }

  /**
   * The declared port's proxy path and the header that authorizes it.
   * @throws GymError `SANDBOX_NOT_FOUND`; `VALIDATION_FAILED` for a port the spec did not declare.
   */
  endpoint(sandboxId: string, port: number): { path: string; headers: Record<string, string> } {
    this.#declared(sandboxId, port);
    return {
      path: `/v1/sandboxes/${encodeURIComponent(sandboxId)}/ports/${port}/`,
      headers: { [PORT_KEY_HEADER]: this.keyFor(sandboxId) },
    };
  }

  /**
   * A connection to the declared `port` in the sandbox, through its relay (started if need be).
   * @throws GymError `SANDBOX_NOT_FOUND`, `SANDBOX_NOT_READY`, `VALIDATION_FAILED` (not declared),
   *   `CAPABILITY_UNSUPPORTED` (the provider has no port relay), `CAPACITY_EXCEEDED`, what the
   *   provider throws starting the relay.
   */
  async connect(sandboxId: string, port: number): Promise<Duplex> {
    const record = this.#declared(sandboxId, port);
    const { state } = this.#lifecycle.view(record);
    if (state !== 'ready')
      throw new GymError('SANDBOX_NOT_READY', `sandbox ${sandboxId} is ${state}`, {
        details: { sandboxId, state },
      });
    const provider = this.#lifecycle.provider(record.provider);
    if (provider.openPortRelay === undefined || provider.capabilities.ports !== true)
      throw new GymError('CAPABILITY_UNSUPPORTED', `provider ${record.provider} cannot carry ports`, {
        details: { provider: record.provider, capability: 'ports' },
      });
    let relay = await this.#relays.get(sandboxId)?.catch(() => undefined);
    if (relay === undefined || !relay.isOpen) {
      const starting = provider.openPortRelay(sandboxId);
      this.#relays.set(sandboxId, starting);
      starting.catch(() => {
        if (this.#relays.get(sandboxId) === starting) this.#relays.delete(sandboxId);
      });
      relay = await starting;
      // Removed while it started: it must not outlive the sandbox's record.
      if (this.#relays.get(sandboxId) !== starting) {
        relay.close();
        throw new GymError('SANDBOX_NOT_FOUND', `sandbox ${sandboxId} was removed`, {
          details: { sandboxId },
        });
      }
    }
    return relay.connect(port);
  }

  /** Closes a removed sandbox's relay and every connection through it. */
  forget(sandboxId: string): void {
    const relay = this.#relays.get(sandboxId);
    this.#relays.delete(sandboxId);
    relay?.then((started) => started.close()).catch(() => {});
  }

  /** Closes every relay (a daemon shutting down; the sandboxes may live on). */
  closeAll(): void {
    for (const sandboxId of [...this.#relays.keys()]) this.forget(sandboxId);
  }

  /** Whether the sandbox's relay is up now (false: none yet, or it closed; the next request starts one). */
  async isRelayOpen(sandboxId: string): Promise<boolean> {
    const relay = await this.#relays.get(sandboxId)?.catch(() => undefined);
    return relay?.isOpen === true;
  }

  /** Relays open now, for tests and metrics. */
  get openRelays(): number {
    return this.#relays.size;
  }

  #declared(sandboxId: string, port: number) {
    const record = this.#lifecycle.record(sandboxId);
    if (!(record.spec.ports ?? []).includes(port))
      throw new GymError(
        'VALIDATION_FAILED',
        `port ${port} is not declared in the spec of sandbox ${sandboxId} (declared: ${
          (record.spec.ports ?? []).join(', ') || 'none'
        })`,
        { details: { sandboxId, port, declared: record.spec.ports ?? [] } },
      );
    return record;
  }
}
