/**
 * The gateway relays of a provider's sandboxes: at most one per sandbox, opened once (callers of
 * a relay being opened share that opening), released when the sandbox is destroyed or the
 * provider closes. One table for all providers; what a relay is (a listener in a network
 * namespace, a process in a Pod or an instance) is the provider's.
 */
import { GymError } from '../../core/errors.ts';

/** What the table needs of a relay: whether it still serves, and how to stop it. */
export interface TableRelay {
  readonly isOpen: boolean;
  close(): void;
}

export class RelayTable<Relay extends TableRelay> {
  readonly #bySandbox = new Map<string, Promise<Relay>>();
  readonly #open = new Set<Relay>();

  /** The sandbox's relay if one is open (or opening and then opens); undefined otherwise. */
  async current(sandboxId: string): Promise<Relay | undefined> {
    const relay = await this.#bySandbox.get(sandboxId)?.catch(() => undefined);
    return relay?.isOpen ? relay : undefined;
  }

  /**
   * The sandbox's open relay, or the one `start` opens. Concurrent callers share one opening; a
   * failed opening is forgotten so a later call may try again.
   */
  async open(sandboxId: string, start: () => Promise<Relay>): Promise<Relay> {
    const pending = this.#bySandbox.get(sandboxId);
    if (pending !== undefined) {
      const relay = await pending.catch(() => undefined);
      if (relay?.isOpen) return relay;
      // It closed by itself (its process ended): replaced, it no longer counts as open.
      if (relay !== undefined) this.#open.delete(relay);
      if (this.#bySandbox.get(sandboxId) === pending) this.#bySandbox.delete(sandboxId);
    }
    const starting = start();
    this.#bySandbox.set(sandboxId, starting);
    // A release while this opens waits for it and closes it (`release`); only a live one is counted.
    starting.then(
      (relay) => {
        if (this.#bySandbox.get(sandboxId) === starting) this.#open.add(relay);
      },
      () => {
        if (this.#bySandbox.get(sandboxId) === starting) this.#bySandbox.delete(sandboxId);
      },
    );
    const relay = await starting;
    if (this.#bySandbox.get(sandboxId) !== starting) {
      throw new GymError(
        'SANDBOX_NOT_FOUND',
        `sandbox ${sandboxId} was destroyed while its gateway relay opened`,
        {
          details: { sandboxId },
        },
      );
    }
    return relay;
  }

  /**
   * Forgets the sandbox's relay and closes it; resolves with it (for provider-side clean-up such
   * as killing its process), or undefined when there was none or it never opened.
   */
  async release(sandboxId: string): Promise<Relay | undefined> {
    const pending = this.#bySandbox.get(sandboxId);
    this.#bySandbox.delete(sandboxId);
    const relay = await pending?.catch(() => undefined);
    if (relay === undefined) return undefined;
    relay.close();
    this.#open.delete(relay);
    return relay;
  }

  /** The sandboxes with a relay open or opening. */
  get sandboxIds(): string[] {
    return [...this.#bySandbox.keys()];
  }

  /** The relays that opened and were not released (for `relayStats`). */
  get openRelays(): ReadonlySet<Relay> {
    return this.#open;
  }
}
