/**
 * Progress of long work (an image build, an eval run) on stderr, with the time elapsed and an
 * estimate of what is left: on a terminal one line redrawn every second, elsewhere (a log file, a
 * CI job) a plain line now and then, so a minute of debootstrap never looks like a hang.
 */
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** `45 s`, `3 min 05 s`, `1 h 02 min`. */
export function formatDuration(ms: number): string {
  const seconds = Math.max(0, Math.round(ms / 1000));
  if (seconds < 60) return `${seconds} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ${String(seconds % 60).padStart(2, '0')} s`;
  return `${Math.floor(minutes / 60)} h ${String(minutes % 60).padStart(2, '0')} min`;
}

/**
 * What is left when the whole is expected to take `estimateMs`: `about 40 s left`, or, past the
 * estimate, `past the usual 1 min 01 s`; empty without an estimate.
 */
export function leftText(elapsedMs: number, estimateMs: number | undefined): string {
  if (estimateMs === undefined) return '';
  return elapsedMs < estimateMs
    ? `about ${formatDuration(estimateMs - elapsedMs)} left`
    : `past the usual ${formatDuration(estimateMs)}`;
}

/** Time left at the rate so far: `done` of `total` items in `elapsedMs`; undefined before the first. */
export function remainingAtRate(elapsedMs: number, done: number, total: number): number | undefined {
  if (done <= 0) return undefined;
  return (elapsedMs / done) * Math.max(0, total - done);
}

export interface Ticker {
  /** Ends the ticking; on a terminal the line is cleared (then `finalLine`, if any, is written). */
  stop(finalLine?: string): void;
}

export interface TickerOptions {
  /** Redraw period on a terminal. */
  intervalMs?: number;
  /** Period of a plain line elsewhere; 0 for none (the caller prints its own lines). */
  lineIntervalMs?: number;
  now?: () => number;
}

/** Calls `render(elapsedMs)` every second on a terminal (every `lineIntervalMs` elsewhere) and prints it. */
export function startTicker(
  stream: NodeJS.WritableStream & { isTTY?: boolean },
  render: (elapsedMs: number) => string,
  options: TickerOptions = {},
): Ticker {
  const now = options.now ?? Date.now;
  const started = now();
  const isTty = stream.isTTY === true;
  const period = isTty ? (options.intervalMs ?? 1000) : (options.lineIntervalMs ?? 15_000);
  const draw = () =>
    stream.write(isTty ? `\r\x1b[2K${render(now() - started)}` : `${render(now() - started)}\n`);
  if (isTty) draw();
  const timer = period > 0 ? setInterval(draw, period) : undefined;
  timer?.unref();
  return {
    stop(finalLine) {
      if (timer !== undefined) clearInterval(timer);
      if (isTty) stream.write('\r\x1b[2K');
      if (finalLine !== undefined) stream.write(`${finalLine}\n`);
    },
  };
}

/**
 * How long things took on this machine before (`image debian-base`: 61 s), kept in the state
 * directory so the next time can say what is left. Best effort: a missing or unreadable file is
 * no history, and a failed write is ignored.
 */
export class Timings {
  readonly #path: string;

  constructor(stateDir: string) {
    this.#path = join(stateDir, 'timings.json');
  }

  async #read(): Promise<Record<string, number>> {
    try {
      const parsed = JSON.parse(await readFile(this.#path, 'utf8')) as unknown;
      return typeof parsed === 'object' && parsed !== null ? (parsed as Record<string, number>) : {};
    } catch {
      return {};
    }
  }

  async get(key: string): Promise<number | undefined> {
    const value = (await this.#read())[key];
    return typeof value === 'number' && Number.isFinite(value) && value > 0 ? value : undefined;
  }

  async record(key: string, durationMs: number): Promise<void> {
    try {
      const all = { ...(await this.#read()), [key]: Math.round(durationMs) };
      await mkdir(join(this.#path, '..'), { recursive: true, mode: 0o700 });
      const temporary = `${this.#path}.${process.pid}.tmp`;
      await writeFile(temporary, `${JSON.stringify(all)}\n`);
      await rename(temporary, this.#path);
    } catch {
      // No history next time; nothing else depends on it.
    }
  }
}
