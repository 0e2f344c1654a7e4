/**
 * One row at a time, as `gym eval run` runs each of its rows: checked as the run checks its rows,
 * materialised as it materialises them, run through the same phases (`rollout.ts`), retried on
 * infrastructure errors as it retries them (`settleRollout`), and answered with the same line. For
 * servers that are sent rows one by one (`gym serve`'s `POST /run`); nothing here writes a rollouts
 * file. Warm pools, when asked for, are defined once for the rows the server expects.
 */
import { randomBytes } from 'node:crypto';
import { NOOP_TRACING } from '../../core/tracing.ts';
import { DEFAULT_LIMITS, type HarnessLimits } from '../../harnesses/harness.ts';
import { parseRow } from '../kinds/kind.ts';
import { materializeRow } from './eval-plan.ts';
import { definePools, removePools } from './eval-pools.ts';
import { infraRetryDelayMs, settleRollout } from './eval-schedule.ts';
import type { EvalOptions } from './eval-types.ts';
import { runRollout } from './rollout.ts';
import { gymFields } from './rollout-line.ts';

export type RowRunnerOptions = Omit<
  EvalOptions,
  'rows' | 'numRepeats' | 'resume' | 'onProgress' | 'forkSetup'
> & {
  /**
   * The rows the server expects (its `--input`, or its environment's tasks): with `usePools`, one
   * pool per image several of them share, sized to the concurrency, as `gym eval run --pool` sizes
   * its pools for its own rows.
   */
  expectedRows?: Array<Record<string, unknown>>;
  /** Repeats of each expected row the pools are sized for (NeMo Gym's `num_repeats`). Default 1. */
  expectedRepeats?: number;
  /** Waits between infra-error attempts (tests give 0). Default: the run's (1 s, doubling, 10 s at most). */
  retryDelayMs?: (attempt: number) => number;
};

export interface RowRunner {
  /**
   * Runs one row to its end and returns its line, the one `gym eval run` writes for it (an infra
   * error after its last attempt included: `mask_sample` true).
   *
   * @throws GymError VALIDATION_FAILED when the row is no task of the environment (nothing ran).
   */
  run(row: Record<string, unknown>): Promise<Record<string, unknown>>;
  /** Removes the pools; rows still running end as they would (their sandboxes are not taken away). */
  close(): Promise<void>;
}

export async function createRowRunner(options: RowRunnerOptions): Promise<RowRunner> {
  const tracing = options.tracing ?? NOOP_TRACING;
  const evalOptions: EvalOptions = { ...options, rows: [], numRepeats: 1, resume: false };
  const limits: HarnessLimits = {
    ...DEFAULT_LIMITS,
    ...(options.environment.limits as Partial<HarnessLimits>),
    ...options.limits,
  };
  const kind = options.environment.implementation;
  const expected = (options.expectedRows ?? []).flatMap((row, position) =>
    Array.from({ length: options.expectedRepeats ?? 1 }, (_, repeat) =>
      materializeRow(row, position, repeat, { name: options.harnessName }),
    ),
  );
  const pools =
    options.usePools === true ? await definePools(evalOptions, expected) : new Map<string, string>();
  const runId = `serve-${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`;
  const delay = options.retryDelayMs ?? infraRetryDelayMs;
  return {
    async run(given) {
      parseRow(kind, given, 0);
      kind.checkRow?.(given, options.environment);
      // NeMo Gym's rows name their agent and indices; a bare task row gets ours, as the run's do.
      const row = materializeRow(
        given,
        0,
        typeof given._ng_rollout_index === 'number' ? given._ng_rollout_index : 0,
        given.agent_ref ?? { name: options.harnessName },
      );
      return settleRollout(
        row,
        runId,
        options.maxInfraAttempts,
        (task, rolloutId, attempt) =>
          runRollout(pools, undefined, evalOptions, task, limits, rolloutId, attempt, tracing),
        async (line, attempt) => {
          const retry = gymFields(line).outcome === 'infra_error' && attempt + 1 < options.maxInfraAttempts;
          if (retry) {
            options.logger.warn(
              { task: row._ng_task_index, rollout: row._ng_rollout_index, attempt },
              'infra error; retrying',
            );
            await new Promise((resolve) => setTimeout(resolve, delay(attempt)));
          }
          return { retry };
        },
      );
    },
    close: () => removePools(evalOptions, pools),
  };
}
