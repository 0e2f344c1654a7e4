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

/**
 * NeMo Gym's `compute_pass_majority_metrics` (reward_profile.py), which its servers call from their
 * own `compute_metrics` (mcqa's: score `accuracy` = the reward, answers from `extracted_answer`).
 * For each k up to the most rollouts of a task and each score: `pass@{k}/{name}` (the unbiased
 * estimator for 0/1 scores, else the max of the first k), `pass@1[avg-of-{k}]/{name}`, with an answer
 * key `majority@{k}/{name}` and the score `no_answer`; for k >= 2 the sample std and standard error
 * across runs of `pass@1[avg-of-{k}]`. Percentages. Not its nested `per_sample_aggregate`.
 */
export function passMajorityMetrics(
  tasks: ReadonlyArray<ReadonlyArray<Record<string, unknown>>>,
  scoreOf: (line: Record<string, unknown>) => Record<string, number>,
  answerKey?: string,
): Record<string, number> {
  if (tasks.length === 0) return {};
  const scores = tasks.map((lines) =>
    lines.map(
      (line): Record<string, number> => ({
        ...scoreOf(line),
        ...(answerKey === undefined
          ? {}
          : { no_answer: line[answerKey] === null || line[answerKey] === undefined ? 1 : 0 }),
      }),
    ),
  );
  const answers = tasks.map((lines) =>
    lines.map((line) => (answerKey === undefined ? null : line[answerKey])),
  );
  const names = [...new Set(scores.flatMap((task) => task.flatMap((score) => Object.keys(score))))].sort();
  const maxK = Math.max(...tasks.map((lines) => lines.length));
  const metrics: Record<string, number> = {};
  const mean = (values: readonly number[]) => values.reduce((sum, value) => sum + value, 0) / values.length;
  for (let k = 1; k <= maxK; k += 1) {
    for (const name of names) {
      const passValues: number[] = [];
      const averages: number[] = [];
      const majorities: number[] = [];
      for (const [index, task] of scores.entries()) {
        const values = task.flatMap((score) => (name in score ? [score[name]!] : []));
        if (values.length >= k) passValues.push(taskPassAtK(values, k));
        const first = task.slice(0, k).flatMap((score) => (name in score ? [score[name]!] : []));
        if (first.length > 0) averages.push(mean(first));
        if (answerKey === undefined) continue;
        const valid = task.slice(0, k).flatMap((score, position) => {
          const answer = answers[index]![position];
          return answer === null || answer === undefined || !(name in score)
            ? []
            : [JSON.stringify([answer, score[name]])];
        });
        if (valid.length === 0) {
          majorities.push(0);
          continue;
        }
        const counts = new Map<string, number>();
        for (const pair of valid) counts.set(pair, (counts.get(pair) ?? 0) + 1);
        const top = Math.max(...counts.values());
        const tied = [...counts]
          .filter(([, count]) => count === top)
          .map(([pair]) => JSON.parse(pair)[1] as number);
        majorities.push(mean(tied));
      }
      if (passValues.length > 0) metrics[`pass@${k}/${name}`] = 100 * mean(passValues);
      if (averages.length > 0) metrics[`pass@1[avg-of-${k}]/${name}`] = 100 * mean(averages);
      if (answerKey !== undefined && majorities.length > 0)
        metrics[`majority@${k}/${name}`] = 100 * mean(majorities);
    }
  }
  // Each run's pass@1 over the tasks that have it, then their spread over the first k runs.
  for (const name of names) {
    const runs: number[] = [];
    for (let run = 0; run < maxK; run += 1) {
      const values = scores.flatMap((task) =>
        run < task.length && name in task[run]! ? [task[run]![name]!] : [],
      );
      if (values.length > 0) runs.push(100 * mean(values));
    }
    for (let k = 2; k <= maxK; k += 1) {
      const first = runs.slice(0, k);
      if (first.length < 2) continue;
      const std = sampleStd(first);
      metrics[`pass@1[avg-of-${k}]/${name}/std_dev_across_runs`] = std;
      metrics[`pass@1[avg-of-${k}]/${name}/std_err_across_runs`] = std / Math.sqrt(first.length);
    }
  }
  return metrics;
}

/** NeMo Gym's `highest_k_metrics`: the entries of `pattern` (with `{k}`) at the largest k, stats left out. */
export function highestKMetrics(
  metrics: Record<string, number>,
  pattern: string,
  scoreNames?: readonly string[],
): Record<string, number> {
  const escaped = pattern.replace(/[.*+?^${}()|[\]\\]/g, '\\$&').replace('\\{k\\}', '(\\d+)');
  const matcher = new RegExp(`^${escaped}/(.+)$`);
  const matches = Object.keys(metrics).flatMap((key) => {
    const match = matcher.exec(key);
    if (match === null) return [];
    const name = match[2]!;
    if (/(std_dev_across_runs|std_err_across_runs|avg_sample_std_dev)$/.test(name)) return [];
    if (scoreNames !== undefined && !scoreNames.includes(name)) return [];
    return [{ k: Number(match[1]), key }];
  });
  if (matches.length === 0) return {};
  const top = Math.max(...matches.map((match) => match.k));
  return Object.fromEntries(
    matches.filter((match) => match.k === top).map((match) => [match.key, metrics[match.key]!]),
  );
}
