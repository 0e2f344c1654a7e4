/**
 * Each sandbox's network log: every attempt through the proxy, allowed or refused, in a ring of
 * bounded size per sandbox. What falls off the front is counted, never silently lost.
 */

export interface EgressAttempt {
  /** ISO time the attempt began. */
  at: string;
  /** `connect` (a CONNECT tunnel, e.g. HTTPS) or `http` (a plain request through the proxy). */
  kind: 'connect' | 'http';
  host: string;
  port: number;
  /** The address connected to, once resolved and allowed. */
  address?: string;
  verdict: 'allowed' | 'refused';
  /** Why it was refused, or why an allowed connection ended early (a limit, a policy change). */
  reason?: string;
  /** Bytes from the sandbox to the host. */
  bytesUp: number;
  /** Bytes from the host to the sandbox. */
  bytesDown: number;
  durationMs: number;
}

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
