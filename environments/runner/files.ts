/** The files `gym eval run --output X.jsonl` writes, named as NeMo Gym names them. */
import { once } from 'node:events';
import { createReadStream, createWriteStream } from 'node:fs';
import { rename, rm } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { finished } from 'node:stream/promises';
import { LineAppender } from '../../core/line-file.ts';

export function outputPaths(output: string) {
  const stem = output.endsWith('.jsonl') ? output.slice(0, -'.jsonl'.length) : output;
  return {
    rollouts: output,
    materialized: `${stem}_materialized_inputs.jsonl`,
    failures: `${stem}_failures.jsonl`,
    metrics: `${stem}_aggregate_metrics.json`,
    profile: `${stem}_reward_profiling.jsonl`,
    /** The agents' own files, one folder per rollout (`agent-logs.ts`). */
    agentLogs: `${stem}_agent_logs`,
    /** Each rollout's egress log, one file per rollout (`network-records.ts`). */
    networkLogs: `${stem}_network_logs`,
  };
}

/**
 * The rows of a JSONL file, read line by line (a file of any size; a whole-file string would stop
 * at Node's largest string, 512 MiB, and read as empty). A missing file has no rows; any other
 * error is thrown, never taken for an empty file (the caller rewrites the file from what it read).
 */
export async function readJsonl(path: string): Promise<Array<Record<string, unknown>>> {
  const rows: Array<Record<string, unknown>> = [];
  const input = createReadStream(path, { encoding: 'utf8' });
  try {
    for await (const line of createInterface({ input, crlfDelay: Number.POSITIVE_INFINITY })) {
      if (line.trim() === '') continue;
      try {
        rows.push(JSON.parse(line) as Record<string, unknown>);
      } catch {
        // A line torn by a kill mid-write: its rollout is simply not done.
      }
    }
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ENOENT') return [];
    throw error;
  }
  return rows;
}

/**
 * Replaces a JSONL file with `rows`, written to a temporary file beside it and renamed over it:
 * a crash or a full disk midway leaves the old file whole.
 */
export async function writeJsonlAtomic(path: string, rows: Iterable<unknown>): Promise<void> {
  const temporary = `${path}.${process.pid}.${Date.now()}.tmp`;
  const output = createWriteStream(temporary);
  try {
    for (const row of rows) {
      if (!output.write(`${JSON.stringify(row)}\n`)) await once(output, 'drain');
    }
    output.end();
    await finished(output);
    await rename(temporary, path);
  } catch (error) {
    output.destroy();
    await rm(temporary, { force: true });
    throw error;
  }
}

/**
 * An append of one row per call, for one run: each line written whole or not at all, in the order
 * the calls were made, and a line torn by an earlier crash left on its own line
 * (`core/line-file.ts`). `fs.appendFile` writes a large line in 512 KiB pieces, so rollouts that
 * finish at once, each with MiBs of model calls, interleaved and were all lost.
 */
export function createJsonlAppender(): (path: string, row: unknown) => Promise<void> {
  // Results are read by the user's own tools, as appendFile made them (0644 under the usual umask).
  const lines = new LineAppender({ mode: 0o644 });
  return (path, row) => lines.append(path, `${JSON.stringify(row)}\n`);
}

export const rolloutKey = (row: Record<string, unknown>) => `${row._ng_task_index}/${row._ng_rollout_index}`;
