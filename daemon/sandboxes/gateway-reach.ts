/**
 * Gateway reach of sandboxes: the model gateway made reachable from inside a sandbox at a URL
 * the provider chooses (see `SandboxProvider.exposeGateway`). The URL is recorded with the
 * sandbox: a sandbox has one gateway URL for its life, and a restarted daemon restores reach at
 * it for the sandboxes it adopts.
 */
import { GymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import type { SandboxProvider } from '../../providers/sandbox-provider.ts';
import { gatewayReachIfAny, requireGatewayReach } from '../capabilities.ts';
import type { GatewayArrivals } from '../gateway/arrivals.ts';
import type { SandboxRecord, StateStore } from '../state-store.ts';
import { forEachLimited, REAPER_CONCURRENCY } from './concurrency.ts';
import type { SandboxRuntime } from './runtime.ts';

export class GatewayReach {
  readonly #store: StateStore;
  readonly #runtime: SandboxRuntime;
  readonly #logger: Logger;
  /**
   * The unix socket serving the gateway's model routes, which providers relay to; without it (a
   * daemon that does not listen) no sandbox gets gateway reach.
   */
  readonly #socketPath: string | undefined;
  /**
   * Each sandbox's own socket to the gateway (`../gateway/arrivals.ts`), which its relay is given
   * instead of the shared one: how the egress proxy knows which sandbox a connection comes from.
   */
  readonly #arrivals: GatewayArrivals | undefined;

  constructor(options: {
    store: StateStore;
    runtime: SandboxRuntime;
    logger: Logger;
    socketPath: string | undefined;
    arrivals?: GatewayArrivals;
  }) {
    this.#store = options.store;
    this.#runtime = options.runtime;
    this.#logger = options.logger;
    this.#socketPath = options.socketPath;
    this.#arrivals = options.arrivals;
  }

  /** The socket the sandbox's relay joins its connections to: its own where the daemon makes one. */
  async #socketFor(sandboxId: string, sharedPath: string): Promise<string> {
    return this.#arrivals === undefined ? sharedPath : this.#arrivals.open(sandboxId);
  }

  /** Closes a removed sandbox's own gateway socket and what arrived through it. */
  forget(sandboxId: string): void {
    this.#arrivals?.close(sandboxId);
  }

  /**
   * Makes the gateway reachable from inside the sandbox and returns the URL its agent must use.
   * @throws GymError `CAPABILITY_UNSUPPORTED` when the provider cannot, or this daemon serves no
   *   gateway socket (it does not listen); what the provider throws.
   */
  async expose(provider: SandboxProvider, record: SandboxRecord): Promise<{ url: string }> {
    const expose = requireGatewayReach(record.provider, provider);
    if (this.#socketPath === undefined) {
      throw new GymError(
        'CAPABILITY_UNSUPPORTED',
        'this daemon serves no gateway socket (it is not listening)',
        {
          details: { capability: 'gatewayReach' },
        },
      );
    }
    const { url } = await expose(record.id, {
      socketPath: await this.#socketFor(record.id, this.#socketPath),
      ...(record.gatewayUrl === null ? {} : { url: record.gatewayUrl }),
    });
    await this.#record(record.id, url);
    return { url };
  }

  async #record(id: string, url: string): Promise<void> {
    const current = this.#store.get(id);
    if (current !== undefined && current.gatewayUrl !== url)
      await this.#store.put({ ...current, gatewayUrl: url });
  }

  /**
   * Restores gateway reach for adopted sandboxes that had it, at the URL recorded: the agents
   * inside keep using that URL across a restart. Cheap when reach is up (the provider answers
   * from memory); one that fails is tried again on the next scan.
   */
  async restore(provider: SandboxProvider, adoptedIds: string[]): Promise<void> {
    const socketPath = this.#socketPath;
    const expose = gatewayReachIfAny(provider);
    if (socketPath === undefined || expose === undefined) return;
    const reachable = adoptedIds.flatMap((id) => {
      const record = this.#store.get(id);
      return record?.gatewayUrl == null || this.#runtime.destroying.has(id)
        ? []
        : [{ id, url: record.gatewayUrl }];
    });
    await forEachLimited(reachable, REAPER_CONCURRENCY, async ({ id, url }) => {
      try {
        const restored = await expose(id, { socketPath: await this.#socketFor(id, socketPath), url });
        if (restored.url !== url) {
          this.#logger.warn(
            { sandboxId: id, url, restoredUrl: restored.url },
            'gateway reach came back at another URL',
          );
          await this.#record(id, restored.url);
        }
      } catch (error) {
        this.#logger.warn(
          { sandboxId: id, url, error: String(error) },
          'could not restore the gateway reach of an adopted sandbox; will retry on the next scan',
        );
      }
    });
  }
}
