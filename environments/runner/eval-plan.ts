/**
 * What a run is to do before any sandbox starts: every (task, repeat) materialised, the output
 * files begun (or, with `--resume`, read for what is finished), and every row checked, so a bad
 * row is written to the failures file once and never run.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, resolve } from 'node:path';
import { GymError, isGymError } from '../../core/errors.ts';
import { parseRow, rowInstruction } from '../kinds/kind.ts';
import type { EvalOptions } from './eval-types.ts';
import { type createJsonlAppender, outputPaths, readJsonl, rolloutKey } from './files.ts';
import { GYM_FIELDS, gymFields } from './rollout-line.ts';

/** Stable task indices: the row's own `_ng_task_index` if present, else its position. */
export function materialize(
  rows: Array<Record<string, unknown>>,
  numRepeats: number,
  harnessName: string,
): Array<Record<string, unknown>> {
  return rows.flatMap((row, position) =>
    Array.from({ length: numRepeats }, (_, repeat) =>
      materializeRow(row, position, repeat, { name: harnessName }),
    ),
  );
}

/**
 * One (task, repeat) as a rollout runs it: the row with its indices (its own `_ng_task_index`, else
 * `position`), the agent it is run by, and its `responses_create_params` (the task's instruction as
 * the user's message when the row has none).
 */
export function materializeRow(
  row: Record<string, unknown>,
  position: number,
  repeat: number,
  agentRef: unknown,
): Record<string, unknown> {
  return {
    ...row,
    _ng_task_index: typeof row._ng_task_index === 'number' ? row._ng_task_index : position,
    _ng_rollout_index: repeat,
    agent_ref: agentRef,
    responses_create_params: row.responses_create_params ?? {
      input: [{ role: 'user', content: rowInstruction(row) }],
    },
  };
}

/** A run's work, decided before it starts. */
export interface EvalPlan {
  paths: ReturnType<typeof outputPaths>;
  /** Every (task, repeat), in order: `numRepeats` lines per row. */
  materialized: Array<Record<string, unknown>>;
  /** Positions of the rows that failed their check: never run. */
  invalid: ReadonlySet<number>;
  /** The rollouts still to run (not finished by an earlier run, not from an invalid row). */
  pending: Array<Record<string, unknown>>;
  /** The rewards a resumed run's rollouts file already holds, and how many. */
  resumedRewardSum: number;
  resumedRewarded: number;
}

/** Finished rollouts (by key) and their rewards, from an earlier run's rollouts file. */
async function readFinished(
  path: string,
): Promise<{ done: Set<string>; rewardSum: number; rewarded: number }> {
  const done = new Set<string>();
  let rewardSum = 0;
  let rewarded = 0;
  for (const row of await readJsonl(path)) {
    done.add(rolloutKey(row));
    rewardSum += Number(row.reward);
    rewarded += 1;
  }
  return { done, rewardSum, rewarded };
}

/**
 * Every row is checked before any sandbox starts: a bad one goes to the failures file with the
 * field it lacks, once, and is never run (a reward from a half-read row would be a lie).
 */
async function checkRows(
  options: EvalOptions,
  paths: ReturnType<typeof outputPaths>,
  appendJsonl: ReturnType<typeof createJsonlAppender>,
): Promise<Set<number>> {
  const kind = options.environment.implementation;
  const invalid = new Set<number>();
  const recorded = new Set(
    (options.resume ? await readJsonl(paths.failures) : [])
      .filter((row) => row._ng_failure_class === 'invalid_row')
      .map((row) => row._ng_task_index),
  );
  for (const [position, row] of options.rows.entries()) {
    try {
      parseRow(kind, row, position);
      kind.checkRow?.(row, options.environment);
    } catch (error) {
      invalid.add(position);
      const reason = isGymError(error) ? error.message : String(error);
      options.logger.warn({ row: position + 1 }, reason);
      const taskIndex = typeof row._ng_task_index === 'number' ? row._ng_task_index : position;
      if (!recorded.has(taskIndex))
        await appendJsonl(paths.failures, {
          ...row,
          _ng_task_index: taskIndex,
          _ng_failure_class: 'invalid_row',
          _ng_failure_terminal: true,
          // Never run: nothing of it measures the policy.
          mask_sample: true,
          failure_reason: `invalid_row: ${reason}`,
          [GYM_FIELDS]: { reason },
        });
    }
  }
  if (invalid.size === options.rows.length && options.rows.length > 0)
    throw new GymError(
      'VALIDATION_FAILED',
      `no row is a valid ${kind.name} task (see ${paths.failures}); the first: ${
        gymFields(
          (await readJsonl(paths.failures)).find((row) => row._ng_failure_class === 'invalid_row') ?? {},
        ).reason
      }`,
    );
  return invalid;
}

/**
 * Begins the output files and decides the run's work. A fresh run empties the rollouts and
 * failures files; a resumed one keeps them and skips what they finished.
 */
export async function planEval(
  options: EvalOptions,
  appendJsonl: ReturnType<typeof createJsonlAppender>,
): Promise<EvalPlan> {
  const paths = outputPaths(options.output);
  await mkdir(dirname(resolve(options.output)), { recursive: true });
  const materialized = materialize(options.rows, options.numRepeats, options.harnessName);
  const finished = options.resume
    ? await readFinished(paths.rollouts)
    : { done: new Set<string>(), rewardSum: 0, rewarded: 0 };
  if (!options.resume) await Promise.all([writeFile(paths.rollouts, ''), writeFile(paths.failures, '')]);
  await writeFile(paths.materialized, materialized.map((row) => `${JSON.stringify(row)}\n`).join(''));
  const invalid = await checkRows(options, paths, appendJsonl);
  const pending = materialized.filter(
    (row, index) =>
      !finished.done.has(rolloutKey(row)) && !invalid.has(Math.floor(index / options.numRepeats)),
  );
  return {
    paths,
    materialized,
    invalid,
    pending,
    resumedRewardSum: finished.rewardSum,
    resumedRewarded: finished.rewarded,
  };
}
