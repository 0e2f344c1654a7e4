/**
 * NeMo Gym's aggregate metrics: baseline stats over numeric fields, and pass@k computed per task
 * with the unbiased estimator `1 - C(c, k) / C(n, k)` (c = incorrect of n, binary rewards) or
 * max of the first k values (continuous rewards), averaged over tasks, as a percentage; and
 * pass@1[avg-of-k], the mean of each task's first k rewards, averaged over tasks.
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
  metrics['std/reward'] = Math.sqrt(all.reduce((sum, value) => sum + (value - mean) ** 2, 0) / all.length);
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
