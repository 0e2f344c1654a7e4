/**
 * The call journal: every model call of a rollout, one JSON line each, appended to
 * `<state dir>/gateway/<rolloutId>.jsonl` as the call ends, so memory stays flat however long a
 * rollout runs. It keeps the rollout's record budget (a record is whole or absent, except the
 * small usage record of a call whose tokens were spent), and reads the records back for the
 * runner, standing a {@link DamagedRecord} in for a line that is not a whole record.
 */
import { mkdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { GymError } from '../../core/errors.ts';
import { LineAppender, readLines } from '../../core/line-file.ts';
import type { Logger } from '../../core/logger.ts';
import { ROLLOUT_ID_PATTERN } from '../../core/schemas/api.ts';
import { type DamagedRecord, isObject, type ModelCallRecord, type UsageSeen } from './model-call.ts';
import type { OpenRollout } from './rollouts.ts';

/**
 * The largest error record written past a rollout's budget: one that keeps the usage of a call
 * the upstream answered (its tokens were spent) when the full record did not fit. At most the
 * calls in flight can add one each, so the budget is passed by a few KiB at most.
 */
const MAX_PAST_BUDGET_RECORD_BYTES = 8 * 1024;

export interface CallJournalOptions {
  /** The gateway's folder of the state dir; one file per rollout in it. */
  directory: string;
  logger: Logger;
  /** The record budget of one rollout, in bytes (see the config's gateway.maxRecordBytesPerRollout). */
  maxRecordBytesPerRollout: number;
}

export class CallJournal {
  readonly #options: CallJournalOptions;
  /** Records are appended from concurrent calls: one whole line each, one at a time per file. */
  readonly #appender = new LineAppender({ mode: 0o600 });

  constructor(options: CallJournalOptions) {
    this.#options = options;
  }

  /**
   * Makes the journal's folder and returns the bytes a rollout id recorded before (a reopened id
   * appends to them, and its budget counts them too).
   */
  async recordedBytes(rolloutId: string): Promise<number> {
    await mkdir(this.#options.directory, { recursive: true, mode: 0o700 });
    return stat(this.#pathOf(rolloutId)).then(
      (info) => info.size,
      () => 0,
    );
  }

  /** Deletes a rollout's records, once every record being written has been. */
  async delete(rolloutId: string): Promise<void> {
    const path = this.#pathOf(rolloutId);
    await this.#appender.idle(path);
    await rm(path, { force: true });
  }

  #pathOf(rolloutId: string): string {
    if (!ROLLOUT_ID_PATTERN.test(rolloutId))
      throw new GymError('ROLLOUT_NOT_FOUND', `no rollout ${rolloutId}`);
    return join(this.#options.directory, `${rolloutId}.jsonl`);
  }

  /**
   * Every record of a rollout, read line by line (a rollout's file is bounded by its budget) up
   * to the end of the last record written whole, so a call being recorded now is not read half.
   * A line that is not a whole record (torn by a crash, or damaged since) does not cost the
   * others: a {@link DamagedRecord} stands in its place, saying where it is, and counts as a call
   * whose tokens are unknown. Records are appended whole (see core/line-file.ts), so no model
   * call can produce such a line; hiding the others would only lose honest calls with it.
   * `isOpen` tells an open rollout that has recorded nothing yet from an unknown one.
   */
  async read(rolloutId: string, isOpen: () => boolean): Promise<Array<ModelCallRecord | DamagedRecord>> {
    const path = this.#pathOf(rolloutId);
    const exists = await stat(path).then(
      () => true,
      () => false,
    );
    if (!exists) {
      if (isOpen()) return [];
      throw new GymError('ROLLOUT_NOT_FOUND', `no records for rollout ${rolloutId}`);
    }
    const size = await this.#appender.settledSize(path);
    const records: Array<ModelCallRecord | DamagedRecord> = [];
    for await (const line of readLines(path, size)) {
      if (line.isTerminated && line.text.trim() === '') continue;
      let parsed: unknown;
      let problem: string | undefined;
      try {
        parsed = JSON.parse(line.text);
        if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed))
          problem = 'it is not a JSON object';
      } catch (error) {
        problem = (error as Error).message;
      }
      if (problem === undefined) {
        records.push(parsed as ModelCallRecord);
        continue;
      }
      const isTorn = !line.isTerminated;
      const message = `line ${line.number} of the records of rollout ${rolloutId} (${line.bytes} bytes at byte ${line.offset}) is not a whole record${isTorn ? ' (the file ends in it: a write cut short)' : ''}: ${problem}; the call it held is lost and its usage unknown`;
      this.#options.logger.warn({ rolloutId, line: line.number, offset: line.offset }, message);
      records.push({
        rolloutId,
        status: 'error',
        usage: null,
        error: { code: 'RECORD_DAMAGED', message },
        damaged: { line: line.number, offset: line.offset, bytes: line.bytes, isTorn },
      });
    }
    return records;
  }

  /**
   * Appends one record, unless it would take the rollout past its record budget: then nothing is
   * written and the call fails with the budget's PAYLOAD_TOO_LARGE (a record is whole or absent).
   */
  async append(
    rollout: OpenRollout,
    record: ModelCallRecord,
    options: { mayPassBudget?: boolean } = {},
  ): Promise<void> {
    const line = `${JSON.stringify(record)}\n`;
    const bytes = Buffer.byteLength(line);
    const budget = this.#options.maxRecordBytesPerRollout;
    const isPastBudgetAllowed = options.mayPassBudget === true && bytes <= MAX_PAST_BUDGET_RECORD_BYTES;
    if (rollout.recordedBytes + bytes > budget && !isPastBudgetAllowed) {
      throw new GymError(
        'PAYLOAD_TOO_LARGE',
        `rollout ${rollout.id} has recorded ${rollout.recordedBytes} bytes of model calls; this call's record of ${bytes} bytes would pass its budget of ${budget} (gateway.maxRecordBytesPerRollout)`,
        { details: { rolloutId: rollout.id, recordedBytes: rollout.recordedBytes, budget } },
      );
    }
    rollout.recordedBytes += bytes;
    await this.#appender.append(this.#pathOf(record.rolloutId), line);
  }

  /**
   * Records a failed call and returns its error, with the usage the upstream reported before the
   * call failed (a call can fail after the upstream answered: its record past the budget, its
   * stream cut). When the record with the request does not fit the budget any more, the request
   * is left out of it; when even that does not fit, it is written past the budget if it carries
   * usage (small, see MAX_PAST_BUDGET_RECORD_BYTES: spent tokens are never left unrecorded), and
   * otherwise not at all.
   */
  async appendFailure(
    rollout: OpenRollout,
    base: Omit<ModelCallRecord, 'durationMs' | 'status'>,
    started: number,
    error: GymError,
    seen: UsageSeen = {},
  ): Promise<GymError> {
    this.#options.logger.warn(
      { rolloutId: rollout.id, code: error.code, error: error.message },
      'model call failed',
    );
    const record: ModelCallRecord = {
      ...base,
      durationMs: performance.now() - started,
      status: 'error',
      error: {
        code: error.code,
        message: error.message,
        ...(typeof error.details.upstreamStatus === 'number'
          ? { upstreamStatus: error.details.upstreamStatus }
          : {}),
      },
      ...(isObject(seen.usage) ? { usage: seen.usage } : {}),
    };
    const omitted = { ...record, request: { omitted: 'past the record budget' } };
    await this.append(rollout, record)
      .catch(() => this.append(rollout, omitted, { mayPassBudget: isObject(seen.usage) }))
      .catch(() => {});
    return error;
  }
}
