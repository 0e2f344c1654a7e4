/**
 * Line files (JSON lines) that several requests append to at once: appended each line whole or
 * not at all, and read back line by line with where each line starts. `fs.appendFile` is not that: it writes a large buffer in pieces of 512 KiB, so two
 * concurrent appends of a MiB interleave and both lines are lost (issue 19, finding 7).
 *
 * Here appends to one path run one after another, each as one write of its whole buffer (looping
 * on a short write, which a full disk or a file-size limit can cause). A write that fails part
 * way is cut back off the file, so what a reader sees is whole lines only; when even that fails,
 * the next line starts on a line of its own, so the torn piece costs only itself. A file whose
 * last line was torn by a crash is treated the same way when it is next appended to.
 */
import { constants, createReadStream } from 'node:fs';
import { type FileHandle, open, stat } from 'node:fs/promises';

const NEWLINE = 0x0a;

/**
 * Writes all of `buffer` at the handle's position (the end, for a handle opened to append),
 * however many write calls the kernel needs. A write that makes no progress is an error.
 */
export async function writeWhole(handle: FileHandle, buffer: Buffer): Promise<void> {
  let offset = 0;
  while (offset < buffer.length) {
    const { bytesWritten } = await handle.write(buffer, offset, buffer.length - offset, null);
    if (bytesWritten <= 0) throw new Error(`a write to the file made no progress at byte ${offset}`);
    offset += bytesWritten;
  }
}

/** Whether a file of this size ends without a newline (its last line torn), read from the handle. */
async function endsTorn(handle: FileHandle, size: number): Promise<boolean> {
  if (size === 0) return false;
  const last = Buffer.alloc(1);
  const { bytesRead } = await handle.read(last, 0, 1, size - 1);
  return bytesRead === 1 && last[0] !== NEWLINE;
}

/** Serialised, whole-line appends to any number of files, one queue per path. */
export class LineAppender {
  readonly #mode: number;
  /** The last operation queued on each path; the entry goes once its queue is idle. */
  readonly #queues = new Map<string, Promise<unknown>>();

  /** @param options.mode permissions of a file created by an append (default 0o600) */
  constructor(options: { mode?: number } = {}) {
    this.#mode = options.mode ?? 0o600;
  }

  /**
   * Appends `line` (which should end in a newline) to `path`, after every append queued on that
   * path before it. Resolves once the line is written whole; rejects with nothing of it in the
   * file (or, if the file could not be cut back, with the next line starting on a new line).
   */
  append(path: string, line: string | Buffer): Promise<void> {
    const buffer = typeof line === 'string' ? Buffer.from(line, 'utf8') : line;
    return this.#enqueue(path, () => this.#write(path, buffer));
  }

  /**
   * The size of `path` once the appends queued before this call have ended (0 when it does not
   * exist): a reader that reads up to it never sees a line still being written.
   */
  settledSize(path: string): Promise<number> {
    return this.#enqueue(path, () =>
      stat(path).then(
        (info) => info.size,
        (error: NodeJS.ErrnoException) => {
          if (error.code === 'ENOENT') return 0;
          throw error;
        },
      ),
    );
  }

  /** Resolves once every append queued on `path` so far has ended (written or failed). */
  async idle(path: string): Promise<void> {
    await this.#queues.get(path)?.catch(() => {});
  }

  #enqueue<T>(path: string, operation: () => Promise<T>): Promise<T> {
    const previous = this.#queues.get(path) ?? Promise.resolve();
    const run = previous.catch(() => {}).then(operation);
    this.#queues.set(path, run);
    const forget = () => {
      if (this.#queues.get(path) === run) this.#queues.delete(path);
    };
    run.then(forget, forget);
    return run;
  }

  async #write(path: string, buffer: Buffer): Promise<void> {
    const handle = await open(
      path,
      // Read and write: the last byte is read to see whether the file's last line was torn.
      constants.O_RDWR | constants.O_APPEND | constants.O_CREAT | (constants.O_NOFOLLOW ?? 0),
      this.#mode,
    );
    try {
      const { size } = await handle.stat();
      // A line torn by a crash (or by a write that could not be cut back) keeps its own line.
      const whole = (await endsTorn(handle, size)) ? Buffer.concat([Buffer.from('\n'), buffer]) : buffer;
      try {
        await writeWhole(handle, whole);
      } catch (error) {
        // Whole or not at all: take back what reached the file. If that fails too, the line
        // stays torn and the next append starts a new line after it.
        await handle.truncate(size).catch(() => {});
        throw error;
      }
    } finally {
      await handle.close();
    }
  }
}

/** One line of a file as read: its text (without the newline), number (from 1) and place in bytes. */
export interface ReadLine {
  text: string;
  number: number;
  /** Byte offset of its first byte. */
  offset: number;
  bytes: number;
  /** False for a last line the file ends in without a newline (torn, when the writer ends each line). */
  isTerminated: boolean;
}

/**
 * The lines of `path` up to byte `endBytes` (exclusive; the whole file when left out), read as a
 * stream. A line is held whole (its writer bounds its size), never the file.
 */
export async function* readLines(path: string, endBytes?: number): AsyncGenerator<ReadLine> {
  if (endBytes === 0) return;
  let pieces: Buffer[] = [];
  let lineStart = 0;
  let position = 0;
  let number = 0;
  const finish = (isTerminated: boolean): ReadLine => {
    const text = Buffer.concat(pieces).toString('utf8');
    const bytes = pieces.reduce((sum, piece) => sum + piece.length, 0);
    number += 1;
    const line = { text, number, offset: lineStart, bytes, isTerminated };
    pieces = [];
    lineStart += bytes + 1;
    return line;
  };
  const stream = createReadStream(path, {
    highWaterMark: 256 * 1024,
    ...(endBytes === undefined ? {} : { end: endBytes - 1 }),
  }) as AsyncIterable<Buffer>;
  for await (const chunk of stream) {
    let start = 0;
    for (let end = chunk.indexOf(NEWLINE); end !== -1; end = chunk.indexOf(NEWLINE, start)) {
      pieces.push(chunk.subarray(start, end));
      yield finish(true);
      start = end + 1;
    }
    if (start < chunk.length) pieces.push(chunk.subarray(start));
    position += chunk.length;
  }
  if (position > lineStart) yield finish(false);
}
