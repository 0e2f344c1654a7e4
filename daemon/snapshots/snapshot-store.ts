/**
 * The daemon's durable memory of its managed snapshots (`core/schemas/snapshot.ts`): what the API
 * shows of each, and what a create needs to start from it (the provider's image for a `native`
 * one, the archive's manifest for an `archive` one).
 *
 * Format: one JSON file (`snapshots.json`), rewritten whole on every change through a temporary
 * file, fdatasync, an atomic rename and a sync of the directory: after a crash the file holds
 * either the state before the change or after it, never a torn mix. The sandbox store journals
 * instead (`../state-store.ts`), because it holds thousands of records renewed every few seconds;
 * snapshots are at most `snapshots.maxCount` (default 64) records of a few hundred bytes, changed
 * only at snapshot, delete and reap, so a whole rewrite costs about what a journal line does and
 * needs no compaction. Writes are serialised; each resolves once its state is durable.
 *
 * A record that no longer validates is skipped with a warning (its files are then found by
 * nobody: the reconcile of `snapshots.ts` removes archive files no record names).
 */
import { mkdir, open, readFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { z } from 'zod';
import type { Logger } from '../../core/logger.ts';
import { SnapshotInfoSchema } from '../../core/schemas/snapshot.ts';

/** Where a snapshot's content lives: the provider's own image, or the daemon's archive file. */
export const SnapshotSourceSchema = z.discriminatedUnion('kind', [
  /** `checkpoint`: a live snapshot's, which the provider restores at create (`CreateOptions.restore`). */
  z.object({ kind: z.literal('native'), image: z.string().min(1), checkpoint: z.string().min(1).optional() }),
  z.object({
    kind: z.literal('archive'),
    manifest: z.object({
      file: z.string().min(1),
      sizeBytes: z.number().int().nonnegative(),
      details: z.record(z.string(), z.unknown()),
    }),
  }),
]);
export type SnapshotSource = z.infer<typeof SnapshotSourceSchema>;

export const SnapshotRecordSchema = z.object({
  info: SnapshotInfoSchema,
  source: SnapshotSourceSchema,
});
export type SnapshotRecord = z.infer<typeof SnapshotRecordSchema>;

const STORE_FILE = 'snapshots.json';
/** Where archive snapshots' files live, under the state directory (0700; each file 0600). */
export const ARCHIVE_DIRECTORY = 'snapshots';

export class SnapshotStore {
  readonly #directory: string;
  readonly #logger: Logger;
  readonly #records = new Map<string, SnapshotRecord>();
  #writing: Promise<void> = Promise.resolve();

  private constructor(directory: string, logger: Logger) {
    this.#directory = directory;
    this.#logger = logger;
  }

  /** Opens the store of state directory `directory`, making its archive directory (0700). */
  static async open(directory: string, logger: Logger): Promise<SnapshotStore> {
    const store = new SnapshotStore(directory, logger);
    await mkdir(store.archiveDirectory, { recursive: true, mode: 0o700 });
    await store.#load();
    return store;
  }

  get path(): string {
    return join(this.#directory, STORE_FILE);
  }

  get archiveDirectory(): string {
    return join(this.#directory, ARCHIVE_DIRECTORY);
  }

  get(id: string): SnapshotRecord | undefined {
    return this.#records.get(id);
  }

  all(): SnapshotRecord[] {
    return [...this.#records.values()];
  }

  get size(): number {
    return this.#records.size;
  }

  /** Stores the record; resolves once it is durable. */
  put(record: SnapshotRecord): Promise<void> {
    this.#records.set(record.info.id, record);
    return this.#persist();
  }

  /** Forgets the record; resolves once that is durable. An unknown id is a no-op. */
  delete(id: string): Promise<void> {
    if (!this.#records.delete(id)) return Promise.resolve();
    return this.#persist();
  }

  /** Waits for the last write. */
  async close(): Promise<void> {
    await this.#writing.catch(() => {});
  }

  async #load(): Promise<void> {
    let text: string;
    try {
      text = await readFile(this.path, 'utf8');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw error;
    }
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch (error) {
      // Only a file written by hand can be torn: every write of ours is a rename of a whole one.
      this.#logger.error({ path: this.path, error: String(error) }, 'the snapshot store is unreadable');
      return;
    }
    const entries = Array.isArray((raw as { snapshots?: unknown })?.snapshots)
      ? (raw as { snapshots: unknown[] }).snapshots
      : [];
    for (const entry of entries) {
      const parsed = SnapshotRecordSchema.safeParse(entry);
      if (parsed.success) this.#records.set(parsed.data.info.id, parsed.data);
      else
        this.#logger.warn(
          { error: parsed.error.message },
          'skipped a stored snapshot that no longer validates',
        );
    }
  }

  /** Writes the whole state atomically, one write at a time (the last one carries every change before it). */
  #persist(): Promise<void> {
    const writing = this.#writing
      .catch(() => {})
      .then(async () => {
        const text = `${JSON.stringify({ snapshots: [...this.#records.values()] })}\n`;
        const temporary = `${this.path}.tmp`;
        const handle = await open(temporary, 'w', 0o600);
        try {
          await handle.writeFile(text);
          await handle.datasync();
        } finally {
          await handle.close();
        }
        await rename(temporary, this.path);
        const directory = await open(this.#directory, 'r');
        await directory.sync().finally(() => directory.close());
      });
    this.#writing = writing;
    return writing;
  }
}
