import { describe, expect, it } from 'vitest';
import { computeRewardMetrics, taskPassAtK } from './metrics.ts';

describe('pass@k', () => {
  it('matches a hand computation with mixed results over repeats', () => {
    // Task A: 4 rollouts, rewards 1,0,0,1 (n=4, c=2 incorrect).
    //   pass@1 = 1 - C(2,1)/C(4,1) = 1 - 2/4 = 0.5; pass@2 = 1 - C(2,2)/C(4,2) = 1 - 1/6 = 5/6;
    //   pass@3 = 1 (c < 3); pass@4 = 1.
    // Task B: 0,0,0,0 -> 0 for every k. Task C: 1,1,1,1 -> 1 for every k.
    const tasks = [
      [1, 0, 0, 1],
      [0, 0, 0, 0],
      [1, 1, 1, 1],
    ];
    expect(taskPassAtK(tasks[0]!, 2)).toBeCloseTo(5 / 6, 12);
    const metrics = computeRewardMetrics(tasks);
    expect(metrics['pass@1/reward']).toBeCloseTo((100 * (0.5 + 0 + 1)) / 3, 10);
    expect(metrics['pass@2/reward']).toBeCloseTo((100 * (5 / 6 + 0 + 1)) / 3, 10);
    expect(metrics['pass@3/reward']).toBeCloseTo((100 * (1 + 0 + 1)) / 3, 10);
    expect(metrics['pass@4/reward']).toBeCloseTo((100 * 2) / 3, 10);
    // pass@1[avg-of-2]: first two rewards per task: A (1+0)/2, B 0, C 1 -> (0.5 + 0 + 1)/3.
    expect(metrics['pass@1[avg-of-2]/reward']).toBeCloseTo(50, 10);
    expect(metrics['mean/reward']).toBeCloseTo(6 / 12, 12);
  });

  it('uses the max of the first k for continuous rewards, and only tasks with k rollouts', () => {
    expect(taskPassAtK([0.2, 0.7, 0.4], 1)).toBe(0.2);
    expect(taskPassAtK([0.2, 0.7, 0.4], 2)).toBe(0.7);
    const metrics = computeRewardMetrics([[1, 1], [0]]);
    expect(metrics['pass@2/reward']).toBe(100);
    expect(metrics['pass@1/reward']).toBe(50);
  });
});
