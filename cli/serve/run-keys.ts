/**
 * `Idempotency-Key` on `gym serve`'s `POST /run`: a row sent again with the key it was first sent
 * with gets the first answer and never runs twice; while the first still runs, the repeat waits
 * for it. The same key with another row is refused (IDEMPOTENCY_KEY_MISMATCH), as the daemon
 * refuses it.
 *
 * Bounded: at most `maxKeys` keys (the oldest forgotten first: a repeat of a key older than that
 * many newer ones runs again, the one case that can) and `maxAnswerBytes` of kept answers (the
 * oldest answers dropped first; their keys stay, so a repeat of one is refused with
 * IDEMPOTENT_OUTCOME_UNKNOWN, never run twice). Kept in memory: a restarted `gym serve` knows no
 * key (docs/integrations/nemo-gym-trainer.md). Keys and rows are kept only as hashes.
 */
import { createHash } from 'node:crypto';
import { GymError } from '../../core/errors.ts';

export interface RunKeysOptions {
  /** Default 100,000 (a few MiB of hashes). */
  maxKeys?: number;
  /** Default 256 MiB. */
  maxAnswerBytes?: number;
}

type Answer = Record<string, unknown>;

interface Entry {
  rowHash: string;
  /** The first run's answer, while it runs and after; undefined once dropped for room. */
  answer: Promise<Answer> | undefined;
  bytes: number;
}

const sha256 = (text: string) => createHash('sha256').update(text).digest('hex');

export class RunKeys {
  readonly #maxKeys: number;
  readonly #maxAnswerBytes: number;
  /** In insertion order: the oldest first. */
  readonly #entries = new Map<string, Entry>();
  #answerBytes = 0;

  constructor(options: RunKeysOptions = {}) {
    this.#maxKeys = options.maxKeys ?? 100_000;
    this.#maxAnswerBytes = options.maxAnswerBytes ?? 256 * 1024 * 1024;
  }

  /**
   * The answer of the row first sent with `key`, or, for a key not seen, `run`'s (kept for the
   * key once it starts; a run that throws forgets the key, so the row may be sent again).
   *
   * @throws GymError IDEMPOTENCY_KEY_MISMATCH when the key came with another row; nothing runs.
   * @throws GymError IDEMPOTENT_OUTCOME_UNKNOWN when the first answer was dropped for room.
   */
  async answer(
    key: string,
    row: unknown,
    run: () => Promise<Answer>,
  ): Promise<{ answer: Answer; replayed: boolean }> {
    const id = sha256(key);
    const rowHash = sha256(JSON.stringify(row));
    const known = this.#entries.get(id);
    if (known !== undefined) {
      if (known.rowHash !== rowHash)
        throw new GymError(
          'IDEMPOTENCY_KEY_MISMATCH',
          'this Idempotency-Key was sent before with another row; nothing ran (a new row needs a new key)',
        );
      if (known.answer === undefined)
        throw new GymError(
          'IDEMPOTENT_OUTCOME_UNKNOWN',
          'the row first sent with this Idempotency-Key ran, but its answer was dropped for room; it is not run again',
          { details: { reason: 'answer-not-kept' } },
        );
      return { answer: await known.answer, replayed: true };
    }
    const entry: Entry = { rowHash, answer: undefined, bytes: 0 };
    entry.answer = run().then(
      (answer) => {
        // A key forgotten while it ran (many newer keys) keeps nothing.
        if (this.#entries.get(id) === entry) this.#keep(entry, answer);
        return answer;
      },
      (error: unknown) => {
        if (this.#entries.get(id) === entry) this.#entries.delete(id);
        throw error;
      },
    );
    this.#entries.set(id, entry);
    while (this.#entries.size > this.#maxKeys) this.#forget(this.#entries.keys().next().value!);
    return { answer: await entry.answer, replayed: false };
  }

  /** How many keys and answer bytes are kept. */
  size(): { keys: number; answerBytes: number } {
    return { keys: this.#entries.size, answerBytes: this.#answerBytes };
  }

  #keep(entry: Entry, answer: Answer): void {
    entry.bytes = Buffer.byteLength(JSON.stringify(answer));
    this.#answerBytes += entry.bytes;
    for (const [, older] of this.#entries) {
      if (this.#answerBytes <= this.#maxAnswerBytes) break;
      if (older.bytes === 0) continue;
      this.#answerBytes -= older.bytes;
      older.bytes = 0;
      older.answer = undefined;
    }
  }

  #forget(id: string): void {
    const entry = this.#entries.get(id);
    if (entry === undefined) return;
    this.#answerBytes -= entry.bytes;
    this.#entries.delete(id);
  }
}
