import { writeFile } from 'node:fs/promises';
import { outputPaths, readJsonl } from '../../../environments/runner/files.ts';
import { computeRewardMetrics } from '../../../environments/runner/metrics.ts';
import type { CommandOf } from '../../command.ts';
import { formatTable } from '../../format.ts';
import type { evalProfile } from '../../program.ts';

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
          task_id: taskRows[0]?.instance_id ?? taskRows[0]?.id,
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
            String(row.task_id),
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
