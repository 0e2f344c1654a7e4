/**
 * Admission control for one provider: at most `maxConcurrentCreates` creates at once and at most
 * `maxLiveSandboxes` live (live + creating). A create over either limit waits in a FIFO queue of
 * at most `queueSize`; past the queue, or after `queueTimeoutMs` in it, it is refused with a 429
 * that says when to retry. The daemon never holds unbounded work, whatever the burst.
 *
 * A sandbox with companion services (`spec.services`) weighs one plus its services against
 * `maxLiveSandboxes`: each is a container the backend runs. It is still one create.
 */
import { GymError } from '../core/errors.ts';

export interface AdmissionLimits {
  maxConcurrentCreates: number;
  maxLiveSandboxes: number;
  queueSize: number;
  queueTimeoutMs: number;
}

interface Waiter {
  weight: number;
  grant: (slot: CreateSlot) => void;
  timer: NodeJS.Timeout;
}

/** What a create holds while it runs; exactly one of its methods must be called. */
export interface CreateSlot {
  /** The create succeeded: the sandbox now counts as live. */
  succeeded(): void;
  /** The create failed: nothing counts. */
  failed(): void;
}

export class Admission {
  readonly #provider: string;
  readonly #limits: AdmissionLimits;
  readonly #queue: Waiter[] = [];
  #creating = 0;
  /** The weight of the creates running (see the top of this file). */
  #creatingWeight = 0;
  #live = 0;

  constructor(provider: string, limits: AdmissionLimits) {
    this.#provider = provider;
    this.#limits = limits;
  }

  get creating(): number {
    return this.#creating;
  }

  get live(): number {
    return this.#live;
  }

  get queued(): number {
    return this.#queue.length;
  }

  /** Sets the live count (after reconcile adopted sandboxes). */
  setLive(count: number): void {
    this.#live = count;
    this.#pump();
  }

  /** A live sandbox of this weight is gone (destroyed, reaped): room for a waiting create. */
  released(weight = 1): void {
    this.#live = Math.max(0, this.#live - weight);
    this.#pump();
  }

  /**
   * Waits for room (FIFO) and returns the slot; throws CAPACITY_EXCEEDED when the queue is full,
   * the wait times out, or the sandbox alone weighs more than the live limit.
   */
  acquire(weight = 1): Promise<CreateSlot> {
    if (weight > this.#limits.maxLiveSandboxes)
      return Promise.reject(
        this.#refusal(
          `a sandbox with ${weight - 1} services weighs ${weight}, over the limit of ${this.#limits.maxLiveSandboxes} live`,
        ),
      );
    if (this.#queue.length === 0 && this.#hasRoom(weight)) return Promise.resolve(this.#take(weight));
    if (this.#queue.length >= this.#limits.queueSize)
      return Promise.reject(this.#refusal('the wait queue is full'));
    return new Promise<CreateSlot>((resolve, reject) => {
      const waiter: Waiter = {
        weight,
        grant: resolve,
        timer: setTimeout(() => {
          const index = this.#queue.indexOf(waiter);
          if (index !== -1) this.#queue.splice(index, 1);
          reject(this.#refusal(`no room within ${this.#limits.queueTimeoutMs} ms`));
        }, this.#limits.queueTimeoutMs),
      };
      this.#queue.push(waiter);
    });
  }

  /**
   * A slot now or none, never waiting: for background work (pool refill) that must not take a
   * slot a request is waiting for. It also leaves `headroom` creates and live sandboxes free, so
   * a request arriving next finds room at once.
   */
  tryAcquire(headroom = 1, weight = 1): CreateSlot | null {
    if (this.#queue.length > 0) return null;
    if (this.#creating + headroom >= this.#limits.maxConcurrentCreates) return null;
    if (this.#live + this.#creatingWeight + headroom + weight > this.#limits.maxLiveSandboxes) return null;
    return this.#take(weight);
  }

  #hasRoom(weight: number): boolean {
    return (
      this.#creating < this.#limits.maxConcurrentCreates &&
      this.#live + this.#creatingWeight + weight <= this.#limits.maxLiveSandboxes
    );
  }

  #take(weight: number): CreateSlot {
    this.#creating += 1;
    this.#creatingWeight += weight;
    let isSettled = false;
    const settle = (isLive: boolean) => {
      if (isSettled) return;
      isSettled = true;
      this.#creating -= 1;
      this.#creatingWeight -= weight;
      if (isLive) this.#live += weight;
      this.#pump();
    };
    return { succeeded: () => settle(true), failed: () => settle(false) };
  }

  /** Hands slots to waiters while there is room; `#take` counts each at once, so none is over-granted. */
  #pump(): void {
    while (this.#queue.length > 0 && this.#hasRoom(this.#queue[0]!.weight)) {
      const waiter = this.#queue.shift()!;
      clearTimeout(waiter.timer);
      waiter.grant(this.#take(waiter.weight));
    }
  }

  #refusal(reason: string): GymError {
    const retryAfterMs = Math.min(30_000, 1000 + this.#queue.length * 100);
    return new GymError(
      'CAPACITY_EXCEEDED',
      `provider ${this.#provider} is at its limit (${this.#live} live, ${this.#creating} creating, ${this.#queue.length} waiting): ${reason}; retry in ${retryAfterMs} ms`,
      {
        details: {
          provider: this.#provider,
          retryAfterMs,
          live: this.#live,
          creating: this.#creating,
          queued: this.#queue.length,
        },
      },
    );
  }
}
