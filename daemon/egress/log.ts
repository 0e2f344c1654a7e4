/**
 * Each sandbox's network log: every attempt through the proxy, allowed or refused, in a ring of
 * bounded size per sandbox. What falls off the front is counted, never silently lost.
 */
import type { z } from 'zod';
import type { EgressAttemptSchema } from '../../core/schemas/api.ts';

/** One attempt (its fields are documented on the API's schema). */
export type EgressAttempt = z.infer<typeof EgressAttemptSchema>;

export class EgressLog {
  readonly #capacity: number;
  readonly #entries = new Map<string, { attempts: EgressAttempt[]; dropped: number }>();

  constructor(capacityPerSandbox: number) {
    this.#capacity = capacityPerSandbox;
  }

  add(sandboxId: string, attempt: EgressAttempt): void {
    let log = this.#entries.get(sandboxId);
    if (log === undefined) {
      log = { attempts: [], dropped: 0 };
      this.#entries.set(sandboxId, log);
    }
    log.attempts.push(attempt);
    if (log.attempts.length > this.#capacity) {
      log.attempts.shift();
      log.dropped += 1;
    }
  }

  /** The attempts, oldest first, and how many older ones were dropped to stay within the bound. */
  read(sandboxId: string): { attempts: EgressAttempt[]; dropped: number } {
    const log = this.#entries.get(sandboxId);
    return { attempts: [...(log?.attempts ?? [])], dropped: log?.dropped ?? 0 };
  }

  forget(sandboxId: string): void {
    this.#entries.delete(sandboxId);
  }
}
