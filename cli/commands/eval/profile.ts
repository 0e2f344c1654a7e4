import { writeFile } from 'node:fs/promises';
import { outputPaths, readJsonl } from '../../../environments/runner/files.ts';
import { computeRewardMetrics } from '../../../environments/runner/metrics.ts';
import type { CommandOf } from '../../command.ts';
import { formatTable } from '../../format.ts';
import type { evalProfile } from '../../program.ts';

/**
 * The task's own id, when its rollouts carry one (SWE-bench's `instance_id`, a row's `id` or
 * `task_id`); many rows have none (NeMo Gym's mcqa rows), and then the table shows `-`, never
 * `undefined`.
 */
function taskId(row: Record<string, unknown> | undefined): string | number | undefined {
  for (const key of ['instance_id', 'id', 'task_id']) {
    const value = row?.[key];
    if ((typeof value === 'string' && value !== '') || typeof value === 'number') return value;
  }
  return undefined;
}

export const evalProfileCommand: CommandOf<typeof evalProfile> = {
  async run({ options: values, stdout }) {
    const rows = await readJsonl(values.input);
    const byTask = new Map<number, Array<Record<string, unknown>>>();
    for (const row of rows)
      byTask.set(Number(row._ng_task_index), [...(byTask.get(Number(row._ng_task_index)) ?? []), row]);
    const profile = [...byTask.entries()]
      .sort(([left], [right]) => left - right)
      .map(([task, taskRows]) => {
        const rewards = taskRows
          .sort((left, right) => Number(left._ng_rollout_index) - Number(right._ng_rollout_index))
          .map((row) => Number(row.reward));
        const metrics = computeRewardMetrics([rewards]);
        return {
          _ng_task_index: task,
          ...(taskId(taskRows[0]) === undefined ? {} : { task_id: taskId(taskRows[0]) }),
          rollouts: rewards.length,
          pass_rate: metrics['mean/reward'],
          ...metrics,
        };
      });
    const path = outputPaths(values.input).profile;
    await writeFile(path, profile.map((row) => `${JSON.stringify(row)}\n`).join(''));
    if (values.json) stdout.write(`${JSON.stringify(profile)}\n`);
    else {
      stdout.write(
        formatTable(
          ['TASK', 'ID', 'ROLLOUTS', 'PASS RATE'],
          profile.map((row) => [
            String(row._ng_task_index),
            row.task_id === undefined ? '-' : String(row.task_id),
            String(row.rollouts),
            (row.pass_rate ?? 0).toFixed(2),
          ]),
        ),
      );
      stdout.write(`written to ${path}\n`);
    }
    return 0;
  },
};
