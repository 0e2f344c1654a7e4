/**
 * Scheduling: the pending rollouts through a bounded number of workers, each rollout retried on
 * infrastructure errors a bounded number of times, and each attempt's line written where its
 * outcome belongs (the rollouts file for a reward, the failures file for the rest) as it ends.
 */
import { randomBytes } from 'node:crypto';
import type { TaskRow } from '../kinds/kind.ts';
import type { RolloutOutcome } from '../verifiers/verifier.ts';
import type { EvalOptions, EvalProgress } from './eval-types.ts';
import type { createJsonlAppender, outputPaths } from './files.ts';
import { gymFields } from './rollout-line.ts';

/** Runs one attempt of one rollout and returns its line. */
export type RunAttempt = (
  row: TaskRow,
  rolloutId: string,
  attempt: number,
) => Promise<Record<string, unknown>>;

interface Recorder {
  options: EvalOptions;
  paths: ReturnType<typeof outputPaths>;
  appendJsonl: ReturnType<typeof createJsonlAppender>;
  progress: EvalProgress;
}

/**
 * Writes one attempt's line where its outcome belongs. Returns whether the rollout is finished
 * (`retry` false) and the reward it earned, if any.
 */
async function recordAttempt(
  recorder: Recorder,
  row: Record<string, unknown>,
  result: Record<string, unknown>,
  attempt: number,
): Promise<{ retry: boolean; earned: number | null }> {
  const { options, paths, appendJsonl, progress } = recorder;
  const ours = gymFields(result);
  const outcome = ours.outcome as RolloutOutcome;
  const reason = (ours.verifier as { reason?: string } | undefined)?.reason;
  if (outcome === 'infra_error') {
    progress.infraErrors += 1;
    await appendJsonl(paths.failures, {
      ...result,
      _ng_failure_class: 'infra_error',
      _ng_failure_terminal: attempt + 1 >= options.maxInfraAttempts,
    });
    options.logger.warn(
      {
        task: row._ng_task_index,
        rollout: row._ng_rollout_index,
        attempt,
        reason,
      },
      'infra error; retrying',
    );
    if (attempt + 1 < options.maxInfraAttempts)
      await new Promise((resolve) => setTimeout(resolve, infraRetryDelayMs(attempt)));
    return { retry: true, earned: null };
  }
  if (outcome === 'verifier_timeout') {
    // Not a reward: the verifier never judged the final state (README, "verifier timeouts").
    // Not retried either: a state that makes the tests hang would hang them again.
    progress.verifierTimeouts += 1;
    await appendJsonl(paths.failures, {
      ...result,
      reward: null,
      _ng_failure_class: 'verifier_timeout',
      _ng_failure_terminal: true,
    });
    options.logger.warn(
      { task: row._ng_task_index, rollout: row._ng_rollout_index },
      'verifier timeout: no reward, written to the failures file',
    );
    return { retry: false, earned: null };
  }
  if (outcome === 'verifier_error' || outcome === 'task_error') {
    // The verifier gave no reward (a Harbor test wrote no reward file), or the task could not be
    // run as written (its service never became healthy): never a 0 among the rewards, and not
    // retried (the same tests, the same task, would do the same).
    await appendJsonl(paths.failures, {
      ...result,
      reward: null,
      _ng_failure_class: outcome,
      _ng_failure_terminal: true,
    });
    options.logger.warn(
      {
        task: row._ng_task_index,
        rollout: row._ng_rollout_index,
        reason,
      },
      outcome === 'task_error'
        ? 'task error: the task cannot run as written, no reward'
        : 'verifier error: no reward',
    );
    return { retry: false, earned: null };
  }
  await appendJsonl(paths.rollouts, result);
  const earned = Number(result.reward);
  progress.rewardSum += earned;
  progress.rewarded += 1;
  return { retry: false, earned };
}

/**
 * One rollout to its end: attempts until one is not retried (`onAttempt` says), at most
 * `maxAttempts`, each with its own rollout id: readable for people (the run, the indices, the
 * attempt), unguessable for agents (the random part keeps another rollout's agent from naming
 * this one). Returns the last attempt's line. `gym eval run` and `gym serve` both end rollouts here.
 */
export async function settleRollout(
  row: TaskRow,
  runId: string,
  maxAttempts: number,
  runAttempt: RunAttempt,
  onAttempt: (result: Record<string, unknown>, attempt: number) => Promise<{ retry: boolean }>,
): Promise<Record<string, unknown>> {
  let result: Record<string, unknown> = {};
  for (let attempt = 0; attempt < Math.max(1, maxAttempts); attempt += 1) {
    result = await runAttempt(
      row,
      `${runId}-${row._ng_task_index}-${row._ng_rollout_index}-${attempt}-${randomBytes(12).toString('hex')}`,
      attempt,
    );
    if (!(await onAttempt(result, attempt)).retry) break;
  }
  return result;
}

/** The wait before an infra error's next attempt: 1 s, doubling, at most 10 s. */
export function infraRetryDelayMs(attempt: number): number {
  return Math.min(10_000, 1000 * 2 ** attempt);
}

/**
 * Runs every pending rollout, `options.concurrency` at once, reporting progress as each ends.
 * Returns when all have ended. The pending rollouts come task by task, so the repeats of one task
 * (a `--fork-setup` group) start close together.
 */
export async function scheduleRollouts(
  recorder: Recorder & { pending: Array<Record<string, unknown>> },
  runAttempt: RunAttempt,
  /** Told once per rollout when it has ended for good (no attempt of it will follow). */
  onSettled?: (row: TaskRow) => Promise<void>,
): Promise<void> {
  const { options, pending, progress } = recorder;
  const runId = `eval-${Date.now().toString(36)}`;
  let next = 0;
  const worker = async () => {
    while (next < pending.length) {
      const row = pending[next++]!;
      let ended: RolloutOutcome | undefined;
      let earned: number | null = null;
      await settleRollout(row, runId, options.maxInfraAttempts, runAttempt, async (result, attempt) => {
        ended = gymFields(result).outcome as RolloutOutcome;
        const recorded = await recordAttempt(recorder, row, result, attempt);
        earned = recorded.earned;
        return recorded;
      });
      await onSettled?.(row);
      // Whatever the end (a verifier error, infra errors to the last attempt): the progress line
      // once named the previous rollout after one without a reward.
      progress.last = {
        task: row._ng_task_index,
        rollout: row._ng_rollout_index,
        outcome: ended ?? 'infra_error',
        reward: earned,
      };
      progress.done += 1;
      options.onProgress?.({ ...progress });
    }
  };
  await Promise.all(
    Array.from({ length: Math.max(1, Math.min(options.concurrency, pending.length)) }, worker),
  );
}
