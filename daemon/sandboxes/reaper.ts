/**
 * The reaper: destroys sandboxes whose lease or deadline has passed. One that is out of its
 * provider's reach past its deadline is forgotten instead (any reaper may destroy it when its
 * part of the backend answers again; waiting for the backend would keep it forever).
 */
import type { Clock } from '../../core/clock.ts';
import type { Logger } from '../../core/logger.ts';
import type { StateStore } from '../state-store.ts';
import { forEachLimited, REAPER_CONCURRENCY } from './concurrency.ts';
import type { Leases } from './leases.ts';
import type { SandboxLifecycle } from './lifecycle.ts';
import type { SandboxRuntime } from './runtime.ts';

/** What the reaper needs of the lifecycle. */
export type ReaperLifecycle = Pick<SandboxLifecycle, 'isShuttingDown' | 'destroy' | 'forget'>;

export class Reaper {
  readonly #store: StateStore;
  readonly #runtime: SandboxRuntime;
  readonly #leases: Leases;
  readonly #lifecycle: ReaperLifecycle;
  readonly #clock: Clock;
  readonly #logger: Logger;
  #isReaping = false;

  constructor(options: {
    store: StateStore;
    runtime: SandboxRuntime;
    leases: Leases;
    lifecycle: ReaperLifecycle;
    clock: Clock;
    logger: Logger;
  }) {
    this.#store = options.store;
    this.#runtime = options.runtime;
    this.#leases = options.leases;
    this.#lifecycle = options.lifecycle;
    this.#clock = options.clock;
    this.#logger = options.logger;
  }

  /** One pass; a pass while another runs, or during shutdown, does nothing. */
  async reap(): Promise<void> {
    if (this.#isReaping || this.#lifecycle.isShuttingDown) return;
    this.#isReaping = true;
    try {
      const now = this.#clock.now();
      const expired = this.#store
        .all()
        .filter((record) => !this.#runtime.destroying.has(record.id) && this.#leases.isExpired(record, now));
      await forEachLimited(expired, REAPER_CONCURRENCY, async (record) => {
        if (this.#runtime.unreachable.has(record.id) && Date.parse(record.deadlineAt) <= now) {
          this.#logger.info(
            {
              sandboxId: record.id,
              provider: record.provider,
              reason: this.#runtime.unreachable.get(record.id),
            },
            'forgot an unreachable sandbox past its deadline',
          );
          return this.#lifecycle.forget(record, 'gone');
        }
        return this.#lifecycle
          .destroy(record.id, 'expired')
          .catch((error: unknown) =>
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
}
