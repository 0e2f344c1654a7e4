/** The files `gym eval run --output X.jsonl` writes, named as NeMo Gym names them. */
import { appendFile, readFile } from 'node:fs/promises';

export function outputPaths(output: string) {
  const stem = output.endsWith('.jsonl') ? output.slice(0, -'.jsonl'.length) : output;
  return {
    rollouts: output,
    materialized: `${stem}_materialized_inputs.jsonl`,
    failures: `${stem}_failures.jsonl`,
    metrics: `${stem}_aggregate_metrics.json`,
    profile: `${stem}_reward_profiling.jsonl`,
  };
}

export async function readJsonl(path: string): Promise<Array<Record<string, unknown>>> {
  const text = await readFile(path, 'utf8').catch(() => '');
  return text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .flatMap((line) => {
      try {
        return [JSON.parse(line) as Record<string, unknown>];
      } catch {
        // A line torn by a kill mid-write: its rollout is simply not done.
        return [];
      }
    });
}

/** Appends one line; appendFile opens, writes and closes, so the line is out of the process at once. */
export function appendJsonl(path: string, row: unknown): Promise<void> {
  return appendFile(path, `${JSON.stringify(row)}\n`);
}

export const rolloutKey = (row: Record<string, unknown>) => `${row._ng_task_index}/${row._ng_rollout_index}`;
