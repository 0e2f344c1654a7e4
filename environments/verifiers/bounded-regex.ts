/**
 * Runs a dataset's regular expression on model or agent text with a time limit. The pattern is the
 * dataset's, the text the adversary's (DESIGN.md 7a): a pattern with nested quantifiers (`^(a+)+$`)
 * and a crafted answer backtrack for hours, and on the main thread that would freeze every rollout
 * of the process. So the matching happens in one worker thread, kept and reused (a message round
 * trip per grade, no worker start), one request at a time; a request that runs past its limit gets
 * the worker terminated and a fresh one started for the next. The worker is unreferenced while
 * idle, so it never keeps a process alive.
 */
import { Worker } from 'node:worker_threads';
import { GymError } from '../../core/errors.ts';

/** How long one pattern may run on one text; far above what a sane pattern takes on any answer. */
export const REGEX_TIME_LIMIT_MS = 1000;

/** The last match's first group, else the whole match (null: no match), or why there is none. */
export type LastMatchResult =
  | { outcome: 'matched'; value: string | null }
  /** Ran past the limit, or failed while matching (V8's backtrack stack overflowed on this text). */
  | { outcome: 'overrun'; reason: string };

/**
 * The worker: every match of the pattern in turn, only the last kept (memory stays flat however
 * many matches), advancing past an empty match as `String.prototype.matchAll` does.
 */
const WORKER_SOURCE = `
const { parentPort } = require('node:worker_threads');
parentPort.on('message', ({ id, pattern, flags, text }) => {
  try {
    const regex = new RegExp(pattern, flags);
    let last = null;
    for (let match = regex.exec(text); match !== null; match = regex.exec(text)) {
      last = match[1] ?? match[0];
      if (match[0] === '') regex.lastIndex += 1;
      if (!regex.global) break;
    }
    parentPort.postMessage({ id, value: last });
  } catch (error) {
    parentPort.postMessage({ id, error: String(error && error.message ? error.message : error) });
  }
});
`;

interface Request {
  pattern: string;
  flags: string;
  text: string;
  resolve: (result: LastMatchResult) => void;
  reject: (error: unknown) => void;
}

export class BoundedRegexRunner {
  private worker: Worker | null = null;
  private online: Promise<void> | null = null;
  private readonly queue: Request[] = [];
  private busy = false;
  private nextId = 0;
  private started = 0;

  private readonly timeLimitMs: number;

  constructor(timeLimitMs = REGEX_TIME_LIMIT_MS) {
    this.timeLimitMs = timeLimitMs;
  }

  /** The last match of `pattern` (compiled with `flags`) in `text`, within the time limit. */
  lastMatch(pattern: string, flags: string, text: string): Promise<LastMatchResult> {
    return new Promise((resolve, reject) => {
      this.queue.push({ pattern, flags, text, resolve, reject });
      if (!this.busy) void this.drain();
    });
  }

  /** How many workers this runner has started: one, plus one after each overrun. */
  get workersStarted(): number {
    return this.started;
  }

  /** Ends the worker (tests; a process that exits needs nothing, the worker is unreferenced). */
  async close(): Promise<void> {
    const worker = this.worker;
    this.worker = null;
    this.online = null;
    if (worker !== null) await worker.terminate();
  }

  private start(): { worker: Worker; online: Promise<void> } {
    if (this.worker === null || this.online === null) {
      const worker = new Worker(WORKER_SOURCE, { eval: true });
      this.started += 1;
      this.worker = worker;
      this.online = new Promise<void>((resolve, reject) => {
        worker.once('online', resolve);
        // Kept for the worker's life: an 'error' with no listener would throw in this process.
        worker.on('error', reject);
      });
      // A worker that died on its own is replaced on the next request.
      worker.once('exit', () => {
        if (this.worker === worker) {
          this.worker = null;
          this.online = null;
        }
      });
      this.online.catch(() => {});
    }
    return { worker: this.worker, online: this.online };
  }

  private async drain(): Promise<void> {
    this.busy = true;
    try {
      for (let request = this.queue.shift(); request !== undefined; request = this.queue.shift()) {
        try {
          request.resolve(await this.run(request));
        } catch (error) {
          request.reject(error);
        }
      }
    } finally {
      this.busy = false;
    }
  }

  private async run(request: Request): Promise<LastMatchResult> {
    const { worker, online } = this.start();
    worker.ref();
    try {
      // The clock starts once the worker runs: a slow start on a loaded machine is not the text's doing.
      await online.catch((error: unknown) => {
        throw new GymError('INTERNAL', `the regex worker did not start: ${String(error)}`, { cause: error });
      });
      const id = this.nextId++;
      return await new Promise<LastMatchResult>((resolve, reject) => {
        const settle = () => {
          clearTimeout(timer);
          worker.off('message', onMessage);
          worker.off('error', onError);
          worker.off('exit', onExit);
        };
        const onMessage = (message: { id: number; value?: string | null; error?: string }) => {
          if (message.id !== id) return;
          settle();
          resolve(
            message.error === undefined
              ? { outcome: 'matched', value: message.value ?? null }
              : { outcome: 'overrun', reason: `the regex failed on this text: ${message.error}` },
          );
        };
        const onError = (error: unknown) => {
          settle();
          reject(new GymError('INTERNAL', `the regex worker failed: ${String(error)}`, { cause: error }));
        };
        const onExit = (code: number) => {
          settle();
          reject(new GymError('INTERNAL', `the regex worker exited (code ${code}) while matching`));
        };
        const timer = setTimeout(() => {
          settle();
          // The worker is stuck in the match: end it; the next request starts another.
          if (this.worker === worker) {
            this.worker = null;
            this.online = null;
          }
          void worker.terminate();
          resolve({
            outcome: 'overrun',
            reason: `the regex ran past its ${this.timeLimitMs} ms limit on this text`,
          });
        }, this.timeLimitMs);
        worker.on('message', onMessage);
        worker.once('error', onError);
        worker.once('exit', onExit);
        worker.postMessage({ id, pattern: request.pattern, flags: request.flags, text: request.text });
      });
    } finally {
      if (this.worker === worker && this.queue.length === 0) worker.unref();
    }
  }
}

/** The process's one runner, shared by every verifier that matches dataset patterns on answers. */
export const sharedRegexRunner = new BoundedRegexRunner();
