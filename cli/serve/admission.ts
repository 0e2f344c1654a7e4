/**
 * Admission of `gym serve`'s rows: at most `concurrency` run at once and at most `queue` wait for
 * a turn; past that a row is refused at once (429 with `Retry-After`), never queued. So a burst of
 * any size holds at most `concurrency + queue` requests' bodies, and the trainer, not this
 * process, keeps the rest.
 */

export interface AdmissionOptions {
  /** Rows run at once. */
  concurrency: number;
  /** Rows that may wait for a turn beyond those; 0 refuses every row while all slots are busy. */
  queue: number;
}

export interface AdmissionState {
  running: number;
  waiting: number;
}

/** A turn to run a row: `release` once, whatever the row's end. */
export interface Turn {
  release(): void;
}

export class RunAdmission {
  readonly #options: AdmissionOptions;
  #running = 0;
  readonly #waiting: Array<() => void> = [];
  /** The mean time a row held its turn, for `Retry-After` (an exponential mean; 0 until one ended). */
  #meanTurnMs = 0;

  constructor(options: AdmissionOptions) {
    if (!(options.concurrency >= 1) || !(options.queue >= 0))
      throw new RangeError('concurrency must be at least 1 and queue at least 0');
    this.#options = options;
  }

  state(): AdmissionState {
    return { running: this.#running, waiting: this.#waiting.length };
  }

  /**
   * A turn now, or once one frees (the row waits in the bounded queue); undefined at once when
   * the queue is full: the caller refuses the row.
   */
  enter(): Promise<Turn> | undefined {
    if (this.#running < this.#options.concurrency) {
      this.#running += 1;
      return Promise.resolve(this.#turn());
    }
    if (this.#waiting.length >= this.#options.queue) return undefined;
    return new Promise((resolve) => {
      this.#waiting.push(() => resolve(this.#turn()));
    });
  }

  /**
   * Seconds a refused row should wait before it is sent again: the queue ahead of it divided
   * among the slots, at the mean time a row has taken so far; at least 1.
   */
  retryAfterSeconds(): number {
    const rounds = (this.#waiting.length + 1) / this.#options.concurrency;
    return Math.max(1, Math.ceil((rounds * this.#meanTurnMs) / 1000));
  }

  #turn(): Turn {
    const started = Date.now();
    let isReleased = false;
    return {
      release: () => {
        if (isReleased) return;
        isReleased = true;
        const tookMs = Date.now() - started;
        this.#meanTurnMs = this.#meanTurnMs === 0 ? tookMs : 0.9 * this.#meanTurnMs + 0.1 * tookMs;
        const next = this.#waiting.shift();
        // The slot passes straight to the next row waiting; none: it frees.
        if (next === undefined) this.#running -= 1;
        else next();
      },
    };
  }
}
