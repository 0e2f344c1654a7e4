/**
 * What the daemon remembers of requests sent with an `Idempotency-Key` (docs/api.md, "Safe
 * retries"): per key, a fingerprint of the request and, once it ran, its answer, so a repeat gets
 * the first answer and never runs twice.
 *
 * Keys are per credential: an entry's id is a hash of the caller's scope (the daemon token, or
 * one scoped grant) and the key, so one caller cannot reach another's answer by sending its key.
 * Neither the key nor the credential is stored.
 *
 * Durable in a JSON-lines journal (`idempotency.jsonl` in the state directory): a `begin` line is
 * written before the request runs (for a create or a fork also synced to disk, an fdatasync
 * shared by concurrent requests; an exec's or a write's is not, as a sync cost each sequential
 * exec 0.25 to 4 ms here, quiet to loaded: a daemon killed keeps it, a host crash may lose it),
 * an `end` line holds the answer. A daemon that stops between the two finds the `begin` alone on its next start and
 * answers a repeat with IDEMPOTENT_OUTCOME_UNKNOWN: the request may or may not have taken effect,
 * and it is not run again.
 *
 * Bounded: an entry lives {@link IDEMPOTENCY_TTL_MS}; at most {@link MAX_ENTRIES} are kept (the
 * oldest finished ones go first); an answer over {@link MAX_ANSWER_BYTES} is not kept (a repeat is
 * told so), and past {@link MAX_KEPT_ANSWER_BYTES} of answers the oldest answers are dropped the
 * same way. A scoped grant has bounds of its own ({@link MAX_ENTRIES_PER_GRANT} keys,
 * {@link MAX_KEPT_ANSWER_BYTES_PER_GRANT} of answers) past which only its own oldest go. The journal is rewritten with the live entries when it grows past twice their size.
 */
import { createHash } from 'node:crypto';
import { type FileHandle, mkdir, open, rename } from 'node:fs/promises';
import { join } from 'node:path';
import type { Clock } from '../../core/clock.ts';
import { writeWhole } from '../../core/line-file.ts';
import type { Logger } from '../../core/logger.ts';

/** How long a key is remembered: retries come within minutes, a restart within a few more. */
export const IDEMPOTENCY_TTL_MS = 60 * 60 * 1000;
/** Keys remembered at most (about 300 bytes each without an answer). */
export const MAX_ENTRIES = 20_000;
/**
 * Keys one scoped grant has remembered at most: past it its own oldest finished keys go, so an
 * agent holding a credential cannot push the trainer's keys out by sending keys of its own.
 */
export const MAX_ENTRIES_PER_GRANT = 1_000;
/** The largest answer kept for a repeat (an exec's result at the default output cap fits). */
export const MAX_ANSWER_BYTES = 4 * 1024 * 1024;
/** All kept answers together; past it the oldest answers are dropped (their keys stay). */
export const MAX_KEPT_ANSWER_BYTES = 64 * 1024 * 1024;
/** One scoped grant's kept answers: past it its own oldest answers are dropped first. */
export const MAX_KEPT_ANSWER_BYTES_PER_GRANT = 8 * 1024 * 1024;
const JOURNAL_FILE = 'idempotency.jsonl';
/** Rewrite the journal when it is larger than twice the live entries plus this. */
const COMPACT_SLACK_BYTES = 4 * 1024 * 1024;

/** An answer as it was sent: status, media type and body text. */
export interface StoredAnswer {
  status: number;
  contentType: string;
  body: string;
}

export type EntryState =
  /** Running in this daemon now: a repeat waits for it. */
  | { kind: 'running'; settled: Promise<void> }
  /** Ran; its answer, or null when it was too large to keep. */
  | { kind: 'done'; answer: StoredAnswer | null }
  /** Began in an earlier run of the daemon, which stopped before it answered. */
  | { kind: 'interrupted' };

export interface IdempotencyEntry {
  id: string;
  /** Who sent it: `token`, or a hash of the grant. */
  owner: string;
  /** Method, route, path parameters and query. */
  request: string;
  /** The body's hash; null while a streamed body is still being read, or when it was not read whole. */
  body: string | null;
  startedAt: number;
  state: EntryState;
  /** Repeats waiting for it to finish. */
  waiting: number;
}

type JournalLine =
  | { op: 'begin'; id: string; owner: string; request: string; body: string | null; at: number }
  | { op: 'end'; id: string; body: string | null; answer: StoredAnswer | null }
  | { op: 'forget'; id: string };

export function sha256(text: string | Buffer): string {
  return createHash('sha256').update(text).digest('hex');
}

/** The entry id of a key sent by a credential's holder. */
export function entryId(scope: string, key: string): string {
  return sha256(`${scope}\n${key}`);
}

export class IdempotencyStore {
  readonly #path: string;
  readonly #clock: Clock;
  readonly #logger: Logger;
  /** In the order they began: the oldest first, for expiry and eviction. */
  readonly #entries = new Map<string, IdempotencyEntry>();
  readonly #settle = new Map<string, () => void>();
  /** How many entries each owner has. */
  readonly #owned = new Map<string, number>();
  /** The bytes of each owner's kept answers. */
  readonly #ownerAnswerBytes = new Map<string, number>();
  #keptAnswerBytes = 0;
  #handle: FileHandle | null = null;
  #journalBytes = 0;
  #pending: Array<{ line: string; sync: boolean; resolve: () => void; reject: (error: Error) => void }> = [];
  #flushing: Promise<void> | null = null;

  private constructor(directory: string, clock: Clock, logger: Logger) {
    this.#path = join(directory, JOURNAL_FILE);
    this.#clock = clock;
    this.#logger = logger;
  }

  static async open(directory: string, clock: Clock, logger: Logger): Promise<IdempotencyStore> {
    const store = new IdempotencyStore(directory, clock, logger);
    await mkdir(directory, { recursive: true, mode: 0o700 });
    await store.#load();
    await store.#compact();
    return store;
  }

  get size(): number {
    return this.#entries.size;
  }

  get keptAnswerBytes(): number {
    return this.#keptAnswerBytes;
  }

  /** The live entry of an id, if any (an expired one is dropped here). */
  get(id: string): IdempotencyEntry | undefined {
    this.#expire();
    return this.#entries.get(id);
  }

  /**
   * Records that a request begins; resolves once the line is written (with `synced`, on disk:
   * a host crash keeps it too). The entry exists (and a repeat waits for it) from this call on.
   */
  begin(id: string, owner: string, request: string, body: string | null, synced = true): Promise<void> {
    this.#expire();
    this.#evict(owner);
    let settle = () => {};
    const settled = new Promise<void>((resolve) => {
      settle = resolve;
    });
    const startedAt = this.#clock.now();
    this.#add({ id, owner, request, body, startedAt, state: { kind: 'running', settled }, waiting: 0 });
    this.#settle.set(id, settle);
    const line = this.#line({ op: 'begin', id, owner, request, body, at: startedAt });
    return this.#append(line, synced).catch((error: unknown) => {
      // Not durable: the request must not run, and its key is free again.
      this.#drop(id);
      throw error;
    });
  }

  /** Records the answer of a request that ran (null: one that cannot be kept). */
  finish(id: string, body: string | null, answer: StoredAnswer | null): void {
    const entry = this.#entries.get(id);
    if (entry === undefined || entry.state.kind !== 'running') return;
    const bytes = answer === null ? 0 : Buffer.byteLength(answer.body);
    const kept = answer !== null && bytes <= MAX_ANSWER_BYTES ? answer : null;
    entry.body = entry.body ?? body;
    this.#done(entry, kept);
    this.#settled(id);
    // Not synced: an end lost to a host crash leaves the begin alone, which answers "unknown".
    this.#append(this.#line({ op: 'end', id, body: entry.body, answer: kept }), false).catch(
      (error: unknown) =>
        this.#logger.warn({ error: String(error) }, 'could not journal an idempotent answer'),
    );
  }

  /** Forgets a request that was refused before it did anything: its key may be sent again. */
  forget(id: string): void {
    const entry = this.#entries.get(id);
    if (entry === undefined || entry.state.kind !== 'running') return;
    this.#drop(id);
    this.#append(this.#line({ op: 'forget', id }), false).catch(() => {});
  }

  /** Marks a request whose answer never came back (its reply was cut off) as interrupted. */
  interrupt(id: string): void {
    const entry = this.#entries.get(id);
    if (entry === undefined || entry.state.kind !== 'running') return;
    entry.state = { kind: 'interrupted' };
    this.#settled(id);
  }

  async close(): Promise<void> {
    await this.#flushing;
    await this.#handle?.close();
    this.#handle = null;
  }

  #settled(id: string): void {
    this.#settle.get(id)?.();
    this.#settle.delete(id);
  }

  #add(entry: IdempotencyEntry): void {
    this.#entries.set(entry.id, entry);
    this.#owned.set(entry.owner, (this.#owned.get(entry.owner) ?? 0) + 1);
  }

  #drop(id: string): void {
    const entry = this.#entries.get(id);
    if (entry === undefined) return;
    this.#unkeep(entry);
    this.#entries.delete(id);
    const owned = (this.#owned.get(entry.owner) ?? 1) - 1;
    if (owned === 0) this.#owned.delete(entry.owner);
    else this.#owned.set(entry.owner, owned);
    this.#settled(id);
  }

  #expire(): void {
    const cutoff = this.#clock.now() - IDEMPOTENCY_TTL_MS;
    for (const entry of this.#entries.values()) {
      if (entry.startedAt > cutoff) break;
      if (entry.state.kind === 'running') continue;
      this.#drop(entry.id);
    }
  }

  /** Room for one more entry: the oldest finished ones go (a running one is never dropped). */
  #evict(owner: string): void {
    this.#trimOwner(owner, MAX_ENTRIES_PER_GRANT - 1);
    if (this.#entries.size < MAX_ENTRIES) return;
    for (const entry of this.#entries.values()) {
      if (this.#entries.size < MAX_ENTRIES) break;
      if (entry.state.kind !== 'running') this.#drop(entry.id);
    }
  }

  /** A scoped grant's oldest finished keys go while it has more than `most`. */
  #trimOwner(owner: string, most: number): void {
    if (owner === 'token' || (this.#owned.get(owner) ?? 0) <= most) return;
    for (const entry of this.#entries.values()) {
      if ((this.#owned.get(owner) ?? 0) <= most) break;
      if (entry.owner === owner && entry.state.kind !== 'running') this.#drop(entry.id);
    }
  }

  /** The entry has run: its answer is kept (null: none), within the bounds on kept answers. */
  #done(entry: IdempotencyEntry, answer: StoredAnswer | null): void {
    entry.state = { kind: 'done', answer };
    if (answer !== null) {
      const bytes = Buffer.byteLength(answer.body);
      this.#keptAnswerBytes += bytes;
      this.#ownerAnswerBytes.set(entry.owner, (this.#ownerAnswerBytes.get(entry.owner) ?? 0) + bytes);
    }
    // Past its own bound, a grant's oldest answers go first, so it cannot crowd out the token holder's.
    if (entry.owner !== 'token')
      this.#trimAnswers(
        (owner) => owner === entry.owner,
        () => (this.#ownerAnswerBytes.get(entry.owner) ?? 0) <= MAX_KEPT_ANSWER_BYTES_PER_GRANT,
      );
    this.#trimAnswers(
      () => true,
      () => this.#keptAnswerBytes <= MAX_KEPT_ANSWER_BYTES,
    );
  }

  /** Forgets an entry's kept answer in the counts (the entry keeps its state). */
  #unkeep(entry: IdempotencyEntry): void {
    if (entry.state.kind !== 'done' || entry.state.answer === null) return;
    const bytes = Buffer.byteLength(entry.state.answer.body);
    this.#keptAnswerBytes -= bytes;
    const owned = (this.#ownerAnswerBytes.get(entry.owner) ?? bytes) - bytes;
    if (owned <= 0) this.#ownerAnswerBytes.delete(entry.owner);
    else this.#ownerAnswerBytes.set(entry.owner, owned);
  }

  /** The oldest answers of the owners chosen go until `enough`; their keys stay, so nothing runs twice. */
  #trimAnswers(chosen: (owner: string) => boolean, enough: () => boolean): void {
    for (const entry of this.#entries.values()) {
      if (enough()) break;
      if (entry.state.kind !== 'done' || entry.state.answer === null || !chosen(entry.owner)) continue;
      this.#unkeep(entry);
      entry.state = { kind: 'done', answer: null };
    }
  }

  #line(line: JournalLine): string {
    return `${JSON.stringify(line)}\n`;
  }

  async #load(): Promise<void> {
    let text: string;
    try {
      const handle = await open(this.#path, 'r');
      try {
        text = await handle.readFile('utf8');
      } finally {
        await handle.close();
      }
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw error;
    }
    let unreadable = 0;
    for (const raw of text.split('\n')) {
      if (raw.trim() === '') continue;
      try {
        this.#apply(JSON.parse(raw) as JournalLine);
      } catch {
        unreadable += 1;
      }
    }
    if (unreadable > 0)
      this.#logger.warn({ lines: unreadable }, 'skipped unreadable lines of the idempotency journal');
    this.#expire();
    while (this.#entries.size > MAX_ENTRIES) this.#drop(this.#entries.keys().next().value!);
  }

  #apply(line: JournalLine): void {
    if (line.op === 'begin' && typeof line.id === 'string' && typeof line.request === 'string') {
      this.#drop(line.id);
      this.#add({
        id: line.id,
        owner: typeof line.owner === 'string' ? line.owner : 'token',
        request: line.request,
        body: typeof line.body === 'string' ? line.body : null,
        startedAt: Number(line.at) || 0,
        state: { kind: 'interrupted' },
        waiting: 0,
      });
      this.#trimOwner(this.#entries.get(line.id)!.owner, MAX_ENTRIES_PER_GRANT);
    } else if (line.op === 'end') {
      const entry = this.#entries.get(line.id);
      if (entry === undefined) return;
      this.#unkeep(entry);
      entry.body = entry.body ?? line.body ?? null;
      this.#done(entry, line.answer ?? null);
    } else if (line.op === 'forget') {
      this.#drop(line.id);
    }
  }

  /** Rewrites the journal as the live entries, atomically. */
  async #compact(): Promise<void> {
    const temporary = `${this.#path}.tmp`;
    const handle = await open(temporary, 'w', 0o600);
    let written = 0;
    try {
      // A running entry keeps its begin: a crash after this still finds it interrupted.
      for (const entry of this.#entries.values()) {
        let text = this.#line({
          op: 'begin',
          id: entry.id,
          owner: entry.owner,
          request: entry.request,
          body: entry.body,
          at: entry.startedAt,
        });
        if (entry.state.kind === 'done')
          text += this.#line({ op: 'end', id: entry.id, body: entry.body, answer: entry.state.answer });
        const buffer = Buffer.from(text, 'utf8');
        await writeWhole(handle, buffer);
        written += buffer.length;
      }
      await handle.datasync();
    } finally {
      await handle.close();
    }
    await this.#handle?.close();
    await rename(temporary, this.#path);
    this.#handle = await open(this.#path, 'a', 0o600);
    this.#journalBytes = written;
  }

  #append(line: string, sync: boolean): Promise<void> {
    return new Promise((resolve, reject) => {
      this.#pending.push({ line, sync, resolve, reject });
      this.#flushing ??= this.#flush();
    });
  }

  async #flush(): Promise<void> {
    while (this.#pending.length > 0) {
      const batch = this.#pending;
      this.#pending = [];
      try {
        if (this.#handle === null) throw new Error('the idempotency journal is closed');
        const buffer = Buffer.from(batch.map((item) => item.line).join(''), 'utf8');
        await writeWhole(this.#handle, buffer);
        if (batch.some((item) => item.sync)) await this.#handle.datasync();
        this.#journalBytes += buffer.length;
        for (const item of batch) item.resolve();
      } catch (error) {
        for (const item of batch) item.reject(error as Error);
      }
      if (this.#journalBytes > 2 * this.#estimateLiveBytes() + COMPACT_SLACK_BYTES)
        await this.#compact().catch((error: unknown) =>
          this.#logger.error({ error: String(error) }, 'idempotency journal compaction failed'),
        );
    }
    this.#flushing = null;
  }

  /** About what the live entries take in the journal: their answers and a line or two each. */
  #estimateLiveBytes(): number {
    return this.#keptAnswerBytes + this.#entries.size * 400;
  }
}
