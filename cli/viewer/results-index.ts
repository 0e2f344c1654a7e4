/**
 * An index of a results file for the viewer: each rollout's summary and where its line is, not the
 * lines themselves. A line holds the gateway's record of every model call (whole requests and
 * responses), so a run's file can be far larger than what the page shows of it; one rollout is
 * read from disk when it is opened. A file that grows (a run in flight appends whole lines) is read
 * from where the last read stopped; a file replaced or rewritten (the runner sorts it at the end,
 * by a rename) is read again from the start.
 */
import { createReadStream } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { type RolloutSummary, summarizeRollout } from './results.ts';

type Json = Record<string, unknown>;

interface Entry {
  offset: number;
  bytes: number;
  summary: RolloutSummary;
}

const NEWLINE = 0x0a;

function parseObject(text: string): Json | undefined {
  try {
    const value: unknown = JSON.parse(text);
    return typeof value === 'object' && value !== null && !Array.isArray(value) ? (value as Json) : undefined;
  } catch {
    // A line torn by a kill mid-write, or the half a writer has not finished: not a rollout.
    return undefined;
  }
}

export class ResultsIndex {
  private readonly path: string;
  private file: { ino: number; size: number; mtimeMs: number } | undefined;
  /** Whole lines (ended by a newline) indexed so far. */
  private entries: Entry[] = [];
  /** Where the first byte not yet part of a whole line is. */
  private indexedTo = 0;
  /** A last line without its newline that parses (a file whose writer ends without one). */
  private tail: Entry | undefined;
  private refreshing: Promise<void> | undefined;

  constructor(path: string) {
    this.path = path;
  }

  /** Every rollout's summary, in file order, after reading what changed. */
  async summaries(): Promise<RolloutSummary[]> {
    await this.refresh();
    return [...this.entries, ...(this.tail === undefined ? [] : [this.tail])].map((entry) => entry.summary);
  }

  /** The line at `position` (from 0), read from disk; undefined past the end. */
  async line(position: number): Promise<Json | undefined> {
    await this.refresh();
    const entry = position === this.entries.length ? this.tail : this.entries[position];
    if (entry === undefined) return undefined;
    const handle = await open(this.path, 'r');
    try {
      const buffer = Buffer.alloc(entry.bytes);
      await handle.read(buffer, 0, entry.bytes, entry.offset);
      return parseObject(buffer.toString('utf8'));
    } finally {
      await handle.close();
    }
  }

  /** One read at a time: concurrent polls share it. */
  private refresh(): Promise<void> {
    this.refreshing ??= this.read().finally(() => {
      this.refreshing = undefined;
    });
    return this.refreshing;
  }

  private async read(): Promise<void> {
    const info = await stat(this.path).catch(() => undefined);
    if (info === undefined) {
      this.reset();
      this.file = undefined;
      return;
    }
    const previous = this.file;
    if (
      previous !== undefined &&
      previous.ino === info.ino &&
      previous.size === info.size &&
      previous.mtimeMs === info.mtimeMs
    )
      return;
    const isAppend = previous !== undefined && previous.ino === info.ino && info.size > previous.size;
    if (!isAppend) this.reset();
    this.file = { ino: info.ino, size: info.size, mtimeMs: info.mtimeMs };
    this.tail = undefined;
    if (info.size <= this.indexedTo) return;
    let lineStart = this.indexedTo;
    let pending: Buffer[] = [];
    let pendingBytes = 0;
    const input = createReadStream(this.path, { start: this.indexedTo, end: info.size - 1 });
    for await (const chunk of input as AsyncIterable<Buffer>) {
      let from = 0;
      for (let index = chunk.indexOf(NEWLINE); index !== -1; index = chunk.indexOf(NEWLINE, from)) {
        const piece = chunk.subarray(from, index);
        const bytes = pendingBytes + piece.length;
        this.add(lineStart, bytes, pending.length === 0 ? piece : Buffer.concat([...pending, piece]));
        lineStart += bytes + 1;
        pending = [];
        pendingBytes = 0;
        from = index + 1;
      }
      if (from < chunk.length) {
        pending.push(chunk.subarray(from));
        pendingBytes += chunk.length - from;
      }
    }
    this.indexedTo = lineStart;
    if (pendingBytes > 0) {
      const line = parseObject(Buffer.concat(pending).toString('utf8'));
      if (line !== undefined)
        this.tail = {
          offset: lineStart,
          bytes: pendingBytes,
          summary: summarizeRollout(line, this.entries.length),
        };
    }
  }

  private add(offset: number, bytes: number, content: Buffer) {
    const text = content.toString('utf8');
    if (text.trim() === '') return;
    const line = parseObject(text);
    if (line !== undefined)
      this.entries.push({ offset, bytes, summary: summarizeRollout(line, this.entries.length) });
  }

  private reset() {
    this.entries = [];
    this.indexedTo = 0;
    this.tail = undefined;
  }
}
