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
import { gymFields } from './rollout-line.ts';
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
  const aggregate = aggregateMetrics(rollouts, harnessName, failures, expectedByTask, kind);
  await writeFile(path, `${JSON.stringify([{ agent_ref: { name: harnessName }, ...aggregate }], null, 2)}\n`);
  return aggregate.agent_metrics;
}

/** NeMo Gym's `AggregateMetrics` of a run's lines (its `/aggregate_metrics` answer, a metrics file's entry). */
export interface AggregateMetrics {
  agent_metrics: Record<string, number>;
  key_metrics: Record<string, number>;
  group_level_metrics: Array<Record<string, unknown>>;
}

/** The metrics of {@link writeMetrics}, computed without a file (`gym serve`'s `/aggregate_metrics`). */
export function aggregateMetrics(
  rollouts: Array<Record<string, unknown>>,
  harnessName: string,
  failures: Array<Record<string, unknown>> = [],
  expectedByTask: ReadonlyMap<number, number> = new Map(),
  kind?: Pick<EnvironmentKind, 'computeMetrics' | 'keyMetrics'>,
): AggregateMetrics {
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
  return { agent_metrics: agentMetrics, key_metrics: keyMetrics, group_level_metrics: groupLevel };
}

/**
 * The metrics of lines sent back by a trainer (NeMo Gym's `/aggregate_metrics`), as `gym eval run`
 * computes them from its files: a line goes where the run would have written it (a reward or an
 * agent's failure to the rollouts, a verifier timeout or error to the failures; an infra error,
 * retried and masked, nowhere). A line of another writer without our fields counts when it has a
 * numeric reward.
 */
export function aggregateLines(
  lines: ReadonlyArray<Record<string, unknown>>,
  harnessName: string,
  kind?: Pick<EnvironmentKind, 'computeMetrics' | 'keyMetrics'>,
): AggregateMetrics {
  const rollouts: Array<Record<string, unknown>> = [];
  const failures: Array<Record<string, unknown>> = [];
  for (const line of lines) {
    const outcome = gymFields(line).outcome ?? (typeof line.reward === 'number' ? 'reward' : undefined);
    if (outcome === 'reward' || outcome === 'agent_error') rollouts.push(line);
    else if (outcome === 'verifier_timeout' || outcome === 'verifier_error')
      failures.push({ ...line, _ng_failure_class: outcome });
  }
  return aggregateMetrics(rollouts, harnessName, failures, new Map(), kind);
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
