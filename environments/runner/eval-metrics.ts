/**
 * The end of a run: the rollouts file rewritten in (task, rollout) order, as NeMo Gym leaves it,
 * and the metrics file computed from it and the terminal failures.
 */
import { writeFile } from 'node:fs/promises';
import type { EnvironmentKind } from '../kinds/kind.ts';
import type { EvalPlan } from './eval-plan.ts';
import type { EvalOptions } from './eval-types.ts';
import { readJsonl, writeJsonlAtomic } from './files.ts';
import { computeRewardMetrics, fieldStats, taskProfile } from './metrics.ts';
import { usageMetrics } from './usage.ts';

/** Rollouts the verifier never judged (no reward), by failure class. */
const UNJUDGED_CLASSES = ['verifier_timeout', 'verifier_error'] as const;

/**
 * The metrics file. `failures` are the run's terminal failures: verifier timeouts and verifier
 * errors are not rewards (the verifier never judged the final state), but an agent can cause
 * them (a test hung by its code, an interpreter it removed), and a policy trained only on the
 * judged rollouts would learn to cause them when it is unsure. So their rates are reported, and
 * `mean/reward_unjudged_as_0` counts them as 0: watch it next to `mean/reward`.
 */
export async function writeMetrics(
  path: string,
  rollouts: Array<Record<string, unknown>>,
  harnessName: string,
  failures: Array<Record<string, unknown>> = [],
  expectedByTask: ReadonlyMap<number, number> = new Map(),
  kind?: Pick<EnvironmentKind, 'computeMetrics' | 'keyMetrics'>,
): Promise<Record<string, number>> {
  const byTask = new Map<number, Array<Record<string, unknown>>>();
  for (const row of rollouts) {
    const task = Number(row._ng_task_index);
    byTask.set(task, [...(byTask.get(task) ?? []), row]);
  }
  const tasks = [...byTask.entries()].sort(([left], [right]) => left - right);
  const rewardsOf = (lines: Array<Record<string, unknown>>) => lines.map((row) => Number(row.reward));
  const unjudged = Object.fromEntries(
    UNJUDGED_CLASSES.map((name) => [name, failures.filter((row) => row._ng_failure_class === name).length]),
  ) as Record<(typeof UNJUDGED_CLASSES)[number], number>;
  const attempted = rollouts.length + unjudged.verifier_timeout + unjudged.verifier_error;
  const rewardSum = rollouts.reduce((sum, row) => sum + Number(row.reward), 0);
  // NeMo Gym's stats of every numeric field (metrics.ts), then ours over them.
  const agentMetrics = {
    ...fieldStats(rollouts),
    ...computeRewardMetrics(tasks.map(([, lines]) => rewardsOf(lines))),
    ...usageMetrics(rollouts),
    ...(attempted === 0
      ? {}
      : {
          'mean/reward_unjudged_as_0': rewardSum / attempted,
          'rate/verifier_timeout': unjudged.verifier_timeout / attempted,
          'rate/verifier_error': unjudged.verifier_error / attempted,
        }),
    ...(rollouts.length === 0 ? {} : kind?.computeMetrics?.(tasks.map(([, lines]) => lines))),
  };
  // Headlines: the rewards' and the tokens', not a row field's mean (a task's `memory_mb`), which
  // NeMo Gym's default (every `mean/`) would list too.
  const headline = (key: string) =>
    /^mean\/(reward|input_tokens|output_tokens|total_tokens|cached_tokens|model_calls|cost_usd)/.test(key) ||
    key.startsWith('pass@');
  const keyMetrics =
    kind?.keyMetrics?.(agentMetrics) ??
    Object.fromEntries(Object.entries(agentMetrics).filter(([key]) => headline(key)));
  const groupLevel = tasks.map(([task, lines]) => ({
    ...taskProfile(task, lines, expectedByTask.get(task) ?? lines.length, {
      agent_ref: { name: harnessName },
    }),
    ...computeRewardMetrics([rewardsOf(lines)]),
    ...usageMetrics(lines),
  }));
  await writeFile(
    path,
    `${JSON.stringify([{ agent_ref: { name: harnessName }, agent_metrics: agentMetrics, key_metrics: keyMetrics, group_level_metrics: groupLevel }], null, 2)}\n`,
  );
  return agentMetrics;
}

/** Sorts the rollouts file, writes the metrics and the kind's reports; returns the counts. */
export async function finishEval(
  options: EvalOptions,
  plan: EvalPlan,
): Promise<{ rollouts: number; failures: number; metrics: Record<string, number> }> {
  const { paths, materialized, invalid } = plan;
  const kind = options.environment.implementation;
  // Rewrite the rollouts sorted by (task, rollout), as NeMo Gym leaves them; then the metrics.
  const rollouts = (await readJsonl(paths.rollouts)).sort(
    (left, right) =>
      Number(left._ng_task_index) - Number(right._ng_task_index) ||
      Number(left._ng_rollout_index) - Number(right._ng_rollout_index),
  );
  await writeJsonlAtomic(paths.rollouts, rollouts);
  const terminalFailures = (await readJsonl(paths.failures)).filter(
    (row) => row._ng_failure_terminal === true,
  );
  // What each task was to have: its repeats, unless its row was invalid (never run).
  const expectedByTask = new Map<number, number>();
  for (const [index, row] of materialized.entries())
    if (!invalid.has(Math.floor(index / options.numRepeats)))
      expectedByTask.set(
        Number(row._ng_task_index),
        (expectedByTask.get(Number(row._ng_task_index)) ?? 0) + 1,
      );
  const metrics = await writeMetrics(
    paths.metrics,
    rollouts,
    options.harnessName,
    terminalFailures,
    expectedByTask,
    kind,
  );
  await kind.writeReports?.({
    output: options.output,
    rows: options.rows,
    rollouts,
    harnessName: options.harnessName,
  });
  return { rollouts: rollouts.length, failures: terminalFailures.length, metrics };
}
