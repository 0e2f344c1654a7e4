import { access, writeFile } from 'node:fs/promises';
import { outputPaths, readJsonl } from '../../../environments/runner/files.ts';
import { fieldStats, taskProfile } from '../../../environments/runner/metrics.ts';
import { GYM_FIELDS } from '../../../environments/runner/rollout-line.ts';
import type { CommandOf } from '../../command.ts';
import { formatTable } from '../../format.ts';
import type { evalProfile } from './definitions.ts';

type Line = Record<string, unknown>;

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

/**
 * A line's task and rollout: its `_ng_*` indices, else (NeMo Gym's older files carry none) its
 * position, each line a task of its own.
 */
function indexed(lines: Line[]): Line[] {
  return lines.map((line, position) =>
    typeof line._ng_task_index === 'number'
      ? {
          ...line,
          _ng_rollout_index: typeof line._ng_rollout_index === 'number' ? line._ng_rollout_index : 0,
        }
      : { ...line, _ng_task_index: position, _ng_rollout_index: 0 },
  );
}

/** The row a task was run from, without what its rollout added, when no materialized input says. */
function sampleOf(line: Line): Line {
  const sample: Line = {};
  for (const [key, value] of Object.entries(line))
    if (!['response', 'reward', GYM_FIELDS].includes(key) && !key.startsWith('_ng_')) sample[key] = value;
  return sample;
}

/**
 * NeMo Gym's reward profile of stored rollouts: one line per task in `_reward_profiling.jsonl` (its
 * stats, the `sample` row it was run from, how many rollouts it has and was to have, one
 * `rollout_infos` entry per rollout) and the agent's stats in `_agent_metrics.json`. The
 * materialized inputs beside the rollouts (or `--materialized-inputs`) give the sample rows and the
 * expected counts; without them, each task is expected to have the rollouts it has.
 */
export const evalProfileCommand: CommandOf<typeof evalProfile> = {
  async run({ options: values, stdout }) {
    const rows = indexed(await readJsonl(values.input));
    const paths = outputPaths(values.input);
    const inputsPath =
      values.materializedInputs ?? ((await exists(paths.materialized)) ? paths.materialized : undefined);
    const inputs = inputsPath === undefined ? [] : indexed(await readJsonl(inputsPath));
    const expected = new Map<number, number>();
    const samples = new Map<number, Line>();
    for (const input of inputs) {
      const task = Number(input._ng_task_index);
      expected.set(task, (expected.get(task) ?? 0) + 1);
      if (!samples.has(task)) {
        const { _ng_task_index: _task, _ng_rollout_index: _rollout, ...sample } = input;
        samples.set(task, sample);
      }
    }
    const byTask = new Map<number, Line[]>();
    for (const row of rows) {
      const task = Number(row._ng_task_index);
      byTask.set(task, [...(byTask.get(task) ?? []), row]);
    }
    const profile = [...byTask.entries()]
      .sort(([left], [right]) => left - right)
      .map(([task, lines]) =>
        taskProfile(
          task,
          lines,
          expected.get(task) ?? lines.length,
          samples.get(task) ?? sampleOf(lines[0]!),
        ),
      );
    await writeFile(paths.profile, profile.map((row) => `${JSON.stringify(row)}\n`).join(''));
    const agentName = String((rows[0]?.agent_ref as { name?: unknown } | undefined)?.name ?? 'unknown');
    const agentMetricsPath = `${paths.profile.slice(0, -'_reward_profiling.jsonl'.length)}_agent_metrics.json`;
    await writeFile(
      agentMetricsPath,
      `${JSON.stringify([{ ...fieldStats(rows), agent_ref: { name: agentName } }])}\n`,
    );
    if (values.json) stdout.write(`${JSON.stringify(profile)}\n`);
    else {
      stdout.write(
        formatTable(
          ['TASK', 'ID', 'ROLLOUTS', 'PASS RATE'],
          profile.map((row) => {
            const sample = row.sample as Line;
            const id = sample.instance_id ?? sample.id ?? sample.uuid;
            return [
              String(row._ng_task_index),
              id === undefined || id === null ? '-' : String(id),
              `${row.num_rollouts}/${row.expected_num_rollouts}`,
              typeof row['mean/reward'] === 'number' ? row['mean/reward'].toFixed(2) : '-',
            ];
          }),
        ),
      );
      stdout.write(`written to ${paths.profile} and ${agentMetricsPath}\n`);
    }
    return 0;
  },
};
