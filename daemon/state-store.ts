/**
 * The daemon's durable memory of its sandboxes: what changes after creation (the lease) and what
 * the API must answer with after a crash (the spec). Labels on the resources carry what never
 * changes; this store carries the rest.
 *
 * Format: a JSON-lines journal (`sandboxes.jsonl`) of `put` and `delete` operations. A write
 * resolves only after the line is on disk (fdatasync); concurrent writes share one sync (group
 * commit), so a burst of 200 creates costs a handful of syncs, not 200. On open the journal is
 * replayed (a torn last line from a crash is ignored) and rewritten compactly via a temporary
 * file and an atomic rename; it is compacted again whenever it grows to several times the live set.
 */
import { type FileHandle, mkdir, open, readFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import type { Logger } from '../core/logger.ts';
import { EnvSchema } from '../core/schemas/common.ts';
import { SandboxSpecSchema } from '../core/schemas/sandbox.ts';

export const SandboxRecordSchema = z.object({
  id: z.string(),
  provider: z.string(),
  spec: SandboxSpecSchema,
  pool: z.string().nullable(),
  createdAt: z.string(),
  leaseExpiresAt: z.string(),
  deadlineAt: z.string(),
  providerRef: z.string(),
  /** For pool members: `idle` (waiting in the pool, not handed out) or `leased`. */
  poolState: z.enum(['idle', 'leased']).nullable().default(null),
  /** Whether it was handed out warm from a pool (false: created for the request). */
  fromPool: z.boolean().default(false),
  /** Environment added to every exec (a pooled sandbox's per-acquire env). */
  execEnv: EnvSchema.default({}),
});
export type SandboxRecord = z.infer<typeof SandboxRecordSchema>;

type JournalLine = { op: 'put'; record: SandboxRecord } | { op: 'delete'; id: string };

const JOURNAL_FILE = 'sandboxes.jsonl';
/** Compact when the journal holds this many lines more than the live records (and at least this many). */
const COMPACT_SLACK_LINES = 2000;

export class StateStore {
  readonly #directory: string;
  readonly #logger: Logger;
  readonly #records = new Map<string, SandboxRecord>();
  #handle: FileHandle | null = null;
  #journalLines = 0;
  #pending: Array<{ line: string; resolve: () => void; reject: (error: Error) => void }> = [];
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
    this.#records.set(record.id, record);
    return this.#append({ op: 'put', record });
  }

  /** Forgets the record; resolves once that is durable. Forgetting an unknown id is a no-op. */
  delete(id: string): Promise<void> {
    if (!this.#records.delete(id)) return Promise.resolve();
    return this.#append({ op: 'delete', id });
  }

  async close(): Promise<void> {
    await this.#flushing;
    await this.#handle?.close();
    this.#handle = null;
  }

  async #load(): Promise<void> {
    let text: string;
    try {
      text = await readFile(this.path, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw error;
    }
    const lines = text.split('\n');
    for (const [index, line] of lines.entries()) {
      if (line.trim() === '') continue;
      try {
        const entry = JSON.parse(line) as JournalLine;
        if (entry.op === 'put') this.#records.set(entry.record.id, SandboxRecordSchema.parse(entry.record));
        else if (entry.op === 'delete') this.#records.delete(entry.id);
      } catch (error) {
        // Only the last line can be torn by a crash mid-write; anything else is worth a warning.
        const isLast = lines.slice(index + 1).every((rest) => rest.trim() === '');
        this.#logger.warn(
          { line: index + 1, isLast, error: String(error) },
          'skipped an unreadable line of the state journal',
        );
      }
    }
  }

  /** Rewrites the journal as one `put` per live record, atomically. */
  async #compact(): Promise<void> {
    const temporary = `${this.path}.tmp`;
    const handle = await open(temporary, 'w', 0o600);
    try {
      const text = this.all()
        .map((record) => `${JSON.stringify({ op: 'put', record })}\n`)
        .join('');
      await handle.writeFile(text);
      await handle.datasync();
    } finally {
      await handle.close();
    }
    await this.#handle?.close();
    await rename(temporary, this.path);
    const directory = await open(this.#directory, 'r');
    await directory.sync().finally(() => directory.close());
    this.#handle = await open(this.path, 'a', 0o600);
    this.#journalLines = this.#records.size;
  }

  #append(entry: JournalLine): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#pending.push({ line: `${JSON.stringify(entry)}\n`, resolve, reject });
      this.#flushing ??= this.#flush();
    });
  }

  async #flush(): Promise<void> {
    while (this.#pending.length > 0) {
      const batch = this.#pending;
      this.#pending = [];
      try {
        if (this.#handle === null) throw new Error('the state store is closed');
        await this.#handle.write(batch.map((item) => item.line).join(''));
        await this.#handle.datasync();
        this.#journalLines += batch.length;
        for (const item of batch) item.resolve();
      } catch (error) {
        for (const item of batch) item.reject(error as Error);
      }
      if (this.#journalLines > this.#records.size * 4 + COMPACT_SLACK_LINES) {
        await this.#compact().catch((error: unknown) =>
          this.#logger.error({ error: String(error) }, 'state journal compaction failed'),
        );
      }
    }
    this.#flushing = null;
  }
}
