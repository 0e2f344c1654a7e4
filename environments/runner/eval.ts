/**
 * The evaluation runner: every (task, repeat) through sandbox -> harness -> verifier, with a
 * bounded number at once; one rollout line flushed as each finishes, failures beside them,
 * aggregate metrics at the end. Infra errors are retried a bounded number of times; `--resume`
 * skips finished rollouts and never writes a line twice.
 *
 * The pieces, one job each: `eval-plan.ts` (materialise, resume, check rows), `eval-pools.ts`
 * (warm pools), `eval-schedule.ts` (workers, retries, where each line goes), `fork-setup.ts`
 * (`--fork-setup`: one setup per task, its repeats forked from it), `rollout.ts` (one rollout's
 * phases), `eval-metrics.ts` (the sorted rollouts file and the metrics).
 */
import { NOOP_TRACING } from '../../core/tracing.ts';
import { DEFAULT_LIMITS, type HarnessLimits } from '../../harnesses/harness.ts';
import { finishEval } from './eval-metrics.ts';
import { planEval } from './eval-plan.ts';
import { definePools, removePools } from './eval-pools.ts';
import { scheduleRollouts } from './eval-schedule.ts';
import type { EvalOptions, EvalProgress, EvalSummary } from './eval-types.ts';
import { createJsonlAppender } from './files.ts';
import { checkForkSupport, ForkSetups } from './fork-setup.ts';
import { runRollout } from './rollout.ts';
import { runRowSetup, sandboxRequest } from './rollout-phases.ts';

export { writeMetrics } from './eval-metrics.ts';
export { materialize } from './eval-plan.ts';
export type { EvalOptions, EvalProgress, EvalSummary } from './eval-types.ts';

export async function runEval(given: EvalOptions): Promise<EvalSummary> {
  const started = Date.now();
  const tracing = given.tracing ?? NOOP_TRACING;
  // Traced, each request to the daemon names the span it is made in.
  const options = tracing.isEnabled
    ? { ...given, client: given.client.withTraceparent(() => tracing.activeTraceparent()) }
    : given;
  const appendJsonl = createJsonlAppender();
  const plan = await planEval(options, appendJsonl);
  const { paths, pending } = plan;
  const progress: EvalProgress = {
    done: 0,
    total: pending.length,
    skipped: plan.materialized.length - pending.length,
    rewardSum: plan.resumedRewardSum,
    rewarded: plan.resumedRewarded,
    infraErrors: 0,
    verifierTimeouts: 0,
  };
  const limits: HarnessLimits = {
    ...DEFAULT_LIMITS,
    ...(options.environment.limits as Partial<HarnessLimits>),
    ...options.limits,
  };
  if (options.forkSetup === true) await checkForkSupport(options);
  const pools = options.usePools !== true ? new Map<string, string>() : await definePools(options, pending);
  const forks =
    options.forkSetup === true
      ? new ForkSetups(options, pending, {
          runRowSetup,
          sandboxRequest: (row) => sandboxRequest(options, pools, row),
        })
      : undefined;
  try {
    await scheduleRollouts(
      { options, paths, appendJsonl, progress, pending },
      (row, rolloutId, attempt) =>
        runRollout(pools, forks, options, row, limits, rolloutId, attempt, tracing),
      forks === undefined ? undefined : (row) => forks.settled(row),
    );
  } finally {
    await forks?.close();
    await removePools(options, pools);
  }
  const finished = await finishEval(options, plan);
  return { ...finished, paths, durationMs: Date.now() - started };
}
