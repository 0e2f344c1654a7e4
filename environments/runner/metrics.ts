/**
 * NeMo Gym's aggregate metrics (its `nemo_gym/reward_profile.py`): `mean/`, `max/`, `min/`,
 * `median/`, `std/` (the sample std, as pandas computes it; 0 for one value) of every numeric field
 * of the rollout lines and of `response.usage`, over all rollouts and per task, with the per-task
 * counts (`num_rollouts`, `expected_num_rollouts`, ...). And, only where every reward is 0 or 1,
 * pass@k with the unbiased estimator `1 - C(c, k) / C(n, k)` (c = incorrect of n), averaged over
 * tasks, as a percentage, and pass@1[avg-of-k], the mean of each task's first k rewards: NeMo Gym
 * computes no pass@k by default, and its servers that do (mcqa) score 0/1; for other rewards (a
 * game's -1/1) a "pass" rate means nothing.
 */

/** C(n, k) as a float; exact enough for the n of an evaluation (a few hundred at most). */
function choose(n: number, k: number): number {
  if (k < 0 || k > n) return 0;
  let result = 1;
  for (let index = 1; index <= k; index += 1) result = (result * (n - k + index)) / index;
  return result;
}

/** pass@k of one task's rewards (as a fraction 0..1). */
export function taskPassAtK(rewards: readonly number[], k: number): number {
  const isBinary = rewards.every((reward) => reward === 0 || reward === 1);
  if (!isBinary) return Math.max(...rewards.slice(0, k));
  const n = rewards.length;
  const incorrect = rewards.filter((reward) => reward === 0).length;
  if (incorrect < k) return 1;
  return 1 - choose(incorrect, k) / choose(n, k);
}

/** The sample standard deviation (n - 1), as pandas' `std()`; 0 for a single value, as NeMo Gym fills it. */
export function sampleStd(values: readonly number[]): number {
  if (values.length < 2) return 0;
  const mean = values.reduce((sum, value) => sum + value, 0) / values.length;
  return Math.sqrt(values.reduce((sum, value) => sum + (value - mean) ** 2, 0) / (values.length - 1));
}

/** `mean/`, `max/`, `min/`, `median/`, `std/` of `name` over `values`. */
export function baselineStats(name: string, values: readonly number[]): Record<string, number> {
  if (values.length === 0) return {};
  const sorted = [...values].sort((left, right) => left - right);
  const middle = sorted.length / 2;
  return {
    [`mean/${name}`]: values.reduce((sum, value) => sum + value, 0) / values.length,
    [`max/${name}`]: sorted.at(-1)!,
    [`min/${name}`]: sorted[0]!,
    [`median/${name}`]:
      sorted.length % 2 === 1
        ? sorted[(sorted.length - 1) / 2]!
        : (sorted[middle - 1]! + sorted[middle]!) / 2,
    [`std/${name}`]: sampleStd(values),
  };
}

/**
 * The numbers NeMo Gym profiles in a rollout line: each top-level number or boolean (as 0/1), and
 * those of `response.usage` over them. Not its `_ng_*` bookkeeping (the indices, the attempt: NeMo
 * Gym would report a `mean/_ng_attempt_index`), and not ours, which are one object.
 */
export function numericFields(line: Record<string, unknown>): Record<string, number> {
  const fields: Record<string, number> = {};
  const usage = (line.response as { usage?: unknown } | undefined)?.usage;
  const merged = { ...line, ...(typeof usage === 'object' && usage !== null ? usage : {}) } as Record<
    string,
    unknown
  >;
  for (const [key, value] of Object.entries(merged)) {
    if (key.startsWith('_ng_')) continue;
    if (typeof value === 'boolean') fields[key] = value ? 1 : 0;
    else if (typeof value === 'number' && Number.isFinite(value)) fields[key] = value;
  }
  return fields;
}

/** The baseline stats of every numeric field of `lines` (a field missing from a line is left out there). */
export function fieldStats(lines: ReadonlyArray<Record<string, unknown>>): Record<string, number> {
  const columns = new Map<string, number[]>();
  for (const line of lines)
    for (const [key, value] of Object.entries(numericFields(line)))
      columns.set(key, [...(columns.get(key) ?? []), value]);
  return Object.assign({}, ...[...columns].map(([key, values]) => baselineStats(key, values)));
}

/**
 * One task's entry in NeMo Gym's shape (`group_level_metrics` of the aggregate metrics, a line of
 * `_reward_profiling.jsonl`): its stats, the `sample` row, the rollouts it has and was to have,
 * and one `rollout_infos` entry per rollout (its numbers, `rollout_id` "task:rollout").
 */
export function taskProfile(
  task: number,
  lines: ReadonlyArray<Record<string, unknown>>,
  expectedRollouts: number,
  sample: Record<string, unknown>,
): Record<string, unknown> {
  const sorted = [...lines].sort(
    (left, right) => Number(left._ng_rollout_index) - Number(right._ng_rollout_index),
  );
  return {
    _ng_task_index: task,
    ...fieldStats(sorted),
    sample,
    num_rollouts: sorted.length,
    expected_num_rollouts: expectedRollouts,
    missing_num_rollouts: expectedRollouts - sorted.length,
    reward_profile_completion_pct: expectedRollouts === 0 ? 100 : (100 * sorted.length) / expectedRollouts,
    rollout_infos: sorted.map((line) => ({
      rollout_id: `${line._ng_task_index}:${line._ng_rollout_index}`,
      _ng_task_index: line._ng_task_index,
      _ng_rollout_index: line._ng_rollout_index,
      ...numericFields(line),
    })),
  };
}

export interface RewardMetrics {
  [name: string]: number;
}

/**
 * `tasks[i]` = the rewards of task i's rollouts in rollout order. Keys: `pass@{k}/reward` and
 * `pass@1[avg-of-{k}]/reward` for k = 1..max rollouts, as percentages; `mean/reward` and friends.
 */
export function computeRewardMetrics(tasks: ReadonlyArray<readonly number[]>): RewardMetrics {
  const metrics: RewardMetrics = {};
  const all = tasks.flat();
  if (all.length === 0) return metrics;
  const sorted = [...all].sort((left, right) => left - right);
  const mean = all.reduce((sum, value) => sum + value, 0) / all.length;
  metrics['mean/reward'] = mean;
  metrics['max/reward'] = sorted.at(-1)!;
  metrics['min/reward'] = sorted[0]!;
  metrics['median/reward'] =
    sorted.length % 2 === 1
      ? sorted[(sorted.length - 1) / 2]!
      : (sorted[sorted.length / 2 - 1]! + sorted[sorted.length / 2]!) / 2;
  metrics['std/reward'] = sampleStd(all);
  if (!all.every((reward) => reward === 0 || reward === 1)) return metrics;
  const maxK = Math.max(...tasks.map((rewards) => rewards.length));
  for (let k = 1; k <= maxK; k += 1) {
    const eligible = tasks.filter((rewards) => rewards.length >= k);
    if (eligible.length > 0) {
      metrics[`pass@${k}/reward`] =
        (100 * eligible.reduce((sum, rewards) => sum + taskPassAtK(rewards, k), 0)) / eligible.length;
    }
    const withAny = tasks.filter((rewards) => rewards.length > 0);
    metrics[`pass@1[avg-of-${k}]/reward`] =
      (100 *
        withAny.reduce((sum, rewards) => {
          const first = rewards.slice(0, k);
          return sum + first.reduce((total, value) => total + value, 0) / first.length;
        }, 0)) /
      withAny.length;
  }
  return metrics;
}
