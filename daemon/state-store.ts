/**
 * The daemon's durable memory of its sandboxes: what changes after creation (the lease) and what
 * the API must answer with after a crash (the spec). Labels on the resources carry what never
 * changes; this store carries the rest.
 *
 * Format: a JSON-lines journal (`sandboxes.jsonl`) of `put`, `lease` and `delete` operations. A
 * renewal writes a `lease` line (id and expiry, about 100 bytes) rather than the whole record, so
 * keepalives on a sandbox with a large spec do not grow the journal by the spec each time. A
 * write resolves only after the line is on disk (fdatasync); concurrent writes share one sync
 * (group commit), so a burst of 200 creates costs a handful of syncs, not 200.
 *
 * On open the journal is read as a stream, line by line, never whole: a line longer than
 * {@link MAX_JOURNAL_LINE_BYTES} is skipped with a warning (its record is lost, the others load),
 * and a torn last line from a crash is ignored. The journal is then rewritten compactly via a
 * temporary file and an atomic rename, and compacted again whenever its size in bytes passes
 * {@link COMPACT_GROWTH_FACTOR} times the live records' size plus {@link COMPACT_SLACK_BYTES}.
 */
import { createReadStream } from 'node:fs';
import { type FileHandle, mkdir, open, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import { writeWhole } from '../core/line-file.ts';
import type { Logger } from '../core/logger.ts';
import { NetworkPolicySchema, type SandboxSpec, SandboxSpecSchema } from '../core/schemas/sandbox.ts';
import { SandboxLineageSchema } from '../core/schemas/snapshot.ts';

/**
 * A stored spec passed the rules of the day its sandbox was created. Rules tighten (size bounds,
 * minimum limits); a live sandbox must not be dropped for that, so a spec the current schema
 * refuses is kept as written, over the current defaults.
 */
const StoredSpecSchema = z.union([
  SandboxSpecSchema,
  z
    .looseObject({ image: z.string() })
    .transform((spec) => ({ ...SandboxSpecSchema.parse({ image: spec.image }), ...spec }) as SandboxSpec),
]);

export const SandboxRecordSchema = z.object({
  id: z.string(),
  provider: z.string(),
  spec: StoredSpecSchema,
  pool: z.string().nullable(),
  createdAt: z.string(),
  leaseExpiresAt: z.string(),
  deadlineAt: z.string(),
  providerRef: z.string(),
  /** The part of the backend that holds it (`SandboxInfo.scope`); absent on a backend of one part. */
  scope: z.string().optional(),
  /** For pool members: `idle` (waiting in the pool, not handed out) or `leased`. */
  poolState: z.enum(['idle', 'leased']).nullable().default(null),
  /** Whether it was handed out warm from a pool (false: created for the request). */
  fromPool: z.boolean().default(false),
  /** Environment added to every exec (a pooled sandbox's per-acquire env); checked at the door, kept as written. */
  execEnv: z.record(z.string(), z.string()).default({}),
  /**
   * The URL its agents reach the gateway at, once it was given reach (`exposeGateway`): a
   * restarted daemon restores reach at exactly this URL.
   */
  gatewayUrl: z.string().nullable().default(null),
  /** Its egress policy (daemon/sandboxes/network.ts); null: none was set, it reaches nothing. */
  egress: NetworkPolicySchema.nullable().optional(),
  /** Where it was forked from (`core/schemas/snapshot.ts`); null or absent for a sandbox that is no fork. */
  lineage: SandboxLineageSchema.nullable().default(null),
});
export type SandboxRecord = z.infer<typeof SandboxRecordSchema>;

type JournalLine =
  | { op: 'put'; record: SandboxRecord }
  | { op: 'lease'; id: string; leaseExpiresAt: string }
  | { op: 'delete'; id: string };

const JOURNAL_FILE = 'sandboxes.jsonl';
/**
 * The longest journal line read back. Specs are bounded at the door (env 256 KiB, labels, no seed
 * files kept), so a record is well under 1 MiB; 32 MiB leaves room for records written before
 * those bounds while keeping one line far from V8's string limit.
 */
export const MAX_JOURNAL_LINE_BYTES = 32 * 1024 * 1024;
/** Compact when the journal is larger than this multiple of the live records' size ... */
const COMPACT_GROWTH_FACTOR = 2;
/** ... plus this much, so a small live set is not rewritten after every few renewals. */
const COMPACT_SLACK_BYTES = 4 * 1024 * 1024;
/** Compaction writes records in batches of about this size, never the whole journal as one string. */
const COMPACT_BATCH_BYTES = 1024 * 1024;

/** A line of the journal as read, or why it was dropped. */
type ReadLine = { line: string; number: number } | { oversizedBytes: number; number: number };

/**
 * Splits a file into lines without ever holding more than `maxLineBytes` of one line: the bytes
 * of a longer line are dropped as they arrive and the line is reported by its size.
 */
async function* readJournalLines(path: string, maxLineBytes: number): AsyncGenerator<ReadLine> {
  let pieces: Buffer[] = [];
  let pieceBytes = 0;
  let lineBytes = 0;
  let number = 0;
  const finish = (): ReadLine => {
    number += 1;
    const read: ReadLine =
      lineBytes > maxLineBytes
        ? { oversizedBytes: lineBytes, number }
        : { line: Buffer.concat(pieces, pieceBytes).toString('utf8'), number };
    pieces = [];
    pieceBytes = 0;
    lineBytes = 0;
    return read;
  };
  const keep = (piece: Buffer) => {
    lineBytes += piece.length;
    if (lineBytes > maxLineBytes) {
      pieces = [];
      pieceBytes = 0;
    } else {
      pieces.push(piece);
      pieceBytes += piece.length;
    }
  };
  for await (const chunk of createReadStream(path, { highWaterMark: 256 * 1024 }) as AsyncIterable<Buffer>) {
    let start = 0;
    for (let end = chunk.indexOf(0x0a); end !== -1; end = chunk.indexOf(0x0a, start)) {
      keep(chunk.subarray(start, end));
      yield finish();
      start = end + 1;
    }
    if (start < chunk.length) keep(chunk.subarray(start));
  }
  if (lineBytes > 0) yield finish();
}

export class StateStore {
  readonly #directory: string;
  readonly #logger: Logger;
  readonly #records = new Map<string, SandboxRecord>();
  /** The size of each live record's `put` line, so compaction is decided in bytes without re-serialising. */
  readonly #recordBytes = new Map<string, number>();
  #liveBytes = 0;
  #journalBytes = 0;
  #handle: FileHandle | null = null;
  #pending: Array<{ line: string; resolve: () => void; reject: (error: Error) => void }> = [];
  /** A failed write left part of its lines in the journal: the next write starts on a new line. */
  #isTorn = false;
  #flushing: Promise<void> | null = null;

  private constructor(directory: string, logger: Logger) {
    this.#directory = directory;
    this.#logger = logger;
  }

  static async open(directory: string, logger: Logger): Promise<StateStore> {
    const store = new StateStore(directory, logger);
    await mkdir(directory, { recursive: true, mode: 0o700 });
    await store.#load();
    await store.#compact();
    return store;
  }

  get path(): string {
    return join(this.#directory, JOURNAL_FILE);
  }

  /** The journal's size on disk in bytes, as this store wrote it. */
  get journalBytes(): number {
    return this.#journalBytes;
  }

  get(id: string): SandboxRecord | undefined {
    return this.#records.get(id);
  }

  all(): SandboxRecord[] {
    return [...this.#records.values()];
  }

  get size(): number {
    return this.#records.size;
  }

  /** Stores the record; resolves once it is durable. */
  put(record: SandboxRecord): Promise<void> {
    const line = `${JSON.stringify({ op: 'put', record } satisfies JournalLine)}\n`;
    this.#remember(record, Buffer.byteLength(line));
    return this.#append(line);
  }

  /**
   * Moves a known record's lease; resolves once that is durable. Writes only the id and the
   * expiry, whatever the size of the record. An unknown id is a no-op.
   */
  renewLease(id: string, leaseExpiresAt: string): Promise<void> {
    const record = this.#records.get(id);
    if (record === undefined) return Promise.resolve();
    this.#records.set(id, { ...record, leaseExpiresAt });
    return this.#append(`${JSON.stringify({ op: 'lease', id, leaseExpiresAt } satisfies JournalLine)}\n`);
  }

  /** Forgets the record; resolves once that is durable. Forgetting an unknown id is a no-op. */
  delete(id: string): Promise<void> {
    if (!this.#forget(id)) return Promise.resolve();
    return this.#append(`${JSON.stringify({ op: 'delete', id } satisfies JournalLine)}\n`);
  }

  async close(): Promise<void> {
    await this.#flushing;
    await this.#handle?.close();
    this.#handle = null;
  }

  #remember(record: SandboxRecord, lineBytes: number): void {
    this.#liveBytes += lineBytes - (this.#recordBytes.get(record.id) ?? 0);
    this.#recordBytes.set(record.id, lineBytes);
    this.#records.set(record.id, record);
  }

  #forget(id: string): boolean {
    this.#liveBytes -= this.#recordBytes.get(id) ?? 0;
    this.#recordBytes.delete(id);
    return this.#records.delete(id);
  }

  async #load(): Promise<void> {
    const problems: Array<{ number: number; error: string }> = [];
    try {
      for await (const read of readJournalLines(this.path, MAX_JOURNAL_LINE_BYTES)) {
        if ('oversizedBytes' in read) {
          this.#logger.warn(
            { line: read.number, bytes: read.oversizedBytes, maxBytes: MAX_JOURNAL_LINE_BYTES },
            'skipped a state journal line over the size limit; the record it held is lost',
          );
          continue;
        }
        if (read.line.trim() === '') continue;
        try {
          this.#apply(JSON.parse(read.line) as JournalLine, Buffer.byteLength(read.line) + 1);
        } catch (error) {
          problems.push({ number: read.number, error: String(error) });
        }
      }
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw error;
    }
    for (const problem of problems) {
      this.#logger.warn(
        // A crash mid-write tears only the journal's last line; anything else is worth a look.
        { line: problem.number, error: problem.error },
        'skipped an unreadable line of the state journal',
      );
    }
  }

  #apply(entry: JournalLine, lineBytes: number): void {
    if (entry.op === 'put') {
      this.#remember(SandboxRecordSchema.parse(entry.record), lineBytes);
    } else if (entry.op === 'lease') {
      const record = this.#records.get(entry.id);
      if (record !== undefined && typeof entry.leaseExpiresAt === 'string')
        this.#records.set(entry.id, { ...record, leaseExpiresAt: entry.leaseExpiresAt });
    } else if (entry.op === 'delete') {
      this.#forget(entry.id);
    }
  }

  /** Rewrites the journal as one `put` per live record, atomically, in bounded batches. */
  async #compact(): Promise<void> {
    const temporary = `${this.path}.tmp`;
    const handle = await open(temporary, 'w', 0o600);
    let written = 0;
    try {
      let batch: string[] = [];
      let batchBytes = 0;
      for (const record of this.#records.values()) {
        const line = `${JSON.stringify({ op: 'put', record } satisfies JournalLine)}\n`;
        const lineBytes = Buffer.byteLength(line);
        this.#remember(record, lineBytes);
        batch.push(line);
        batchBytes += lineBytes;
        if (batchBytes >= COMPACT_BATCH_BYTES) {
          await writeWhole(handle, Buffer.from(batch.join(''), 'utf8'));
          written += batchBytes;
          batch = [];
          batchBytes = 0;
        }
      }
      if (batch.length > 0) await writeWhole(handle, Buffer.from(batch.join(''), 'utf8'));
      written += batchBytes;
      await handle.datasync();
    } finally {
      await handle.close();
    }
    await this.#handle?.close();
    await rename(temporary, this.path);
    const directory = await open(this.#directory, 'r');
    await directory.sync().finally(() => directory.close());
    this.#handle = await open(this.path, 'a', 0o600);
    this.#journalBytes = written;
  }

  #append(line: string): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#pending.push({ line, resolve, reject });
      this.#flushing ??= this.#flush();
    });
  }

  async #flush(): Promise<void> {
    while (this.#pending.length > 0) {
      const batch = this.#pending;
      this.#pending = [];
      try {
        if (this.#handle === null) throw new Error('the state store is closed');
        const handle = this.#handle;
        const text = `${this.#isTorn ? '\n' : ''}${batch.map((item) => item.line).join('')}`;
        const buffer = Buffer.from(text, 'utf8');
        try {
          // One write of the whole batch (looping on a short one), so lines never interleave.
          await writeWhole(handle, buffer);
        } catch (error) {
          // Whole lines or none: take back what reached the file, or keep the next line apart.
          await handle.truncate(this.#journalBytes).then(
            () => {
              this.#isTorn = false;
            },
            async () => {
              this.#isTorn = true;
              // The journal is longer than counted: count what is there, so a later cut back stays past it.
              this.#journalBytes = (await handle.stat().catch(() => null))?.size ?? this.#journalBytes;
            },
          );
          throw error;
        }
        this.#isTorn = false;
        await handle.datasync();
        this.#journalBytes += buffer.length;
        for (const item of batch) item.resolve();
      } catch (error) {
        for (const item of batch) item.reject(error as Error);
      }
      if (this.#journalBytes > this.#liveBytes * COMPACT_GROWTH_FACTOR + COMPACT_SLACK_BYTES) {
        await this.#compact().catch((error: unknown) =>
          this.#logger.error({ error: String(error) }, 'state journal compaction failed'),
        );
      }
    }
    this.#flushing = null;
  }
}
