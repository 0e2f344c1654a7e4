/**
 * SWE-bench's files beside a run's own (`X.jsonl` -> `X_swebench/`), so its tooling and people
 * used to it find what they expect:
 * - `<instance_id>/report.json`: `{ "<instance_id>": { patch_is_None, patch_exists,
 *   patch_successfully_applied, resolved, tests_status } }`, for each graded rollout (repeats
 *   after the first in `<instance_id>/rollout-<n>/report.json`); with `patch.diff` beside it.
 *   As in SWE-bench, an empty patch or one that does not apply gets none.
 * - `preds.json`: the predictions in SWE-bench's format (`{ id: { instance_id,
 *   model_name_or_path, model_patch } }`), first rollout of each instance.
 * - `run_report.json`: SWE-bench's run report over the first rollout of each instance.
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gymFields } from '../../runner/rollout-line.ts';
import type { RunReportContext } from '../kind.ts';

export function sweBenchDirectory(output: string): string {
  return `${output.endsWith('.jsonl') ? output.slice(0, -'.jsonl'.length) : output}_swebench`;
}

const SAFE_ID = /^[A-Za-z0-9._-]+$/;

export async function writeSweBenchReports(context: RunReportContext): Promise<void> {
  const directory = sweBenchDirectory(context.output);
  await mkdir(directory, { recursive: true });
  const predictions: Record<string, unknown> = {};
  const firstRollout = new Map<string, Record<string, unknown>>();
  for (const rollout of context.rollouts) {
    const id = String(rollout.instance_id);
    // Ids come from validated rows; one that is not a plain name never becomes a path.
    if (!SAFE_ID.test(id) || id === '.' || id === '..') continue;
    const verifier = (gymFields(rollout).verifier ?? {}) as Record<string, unknown>;
    const repeat = Number(rollout._ng_rollout_index ?? 0);
    if (repeat === 0 || !firstRollout.has(id)) firstRollout.set(id, rollout);
    const patch = typeof verifier.modelPatch === 'string' ? verifier.modelPatch : null;
    if (repeat === 0)
      predictions[id] = { instance_id: id, model_name_or_path: context.harnessName, model_patch: patch };
    if (verifier.report === undefined) continue;
    const place = repeat === 0 ? join(directory, id) : join(directory, id, `rollout-${repeat}`);
    await mkdir(place, { recursive: true });
    await writeFile(join(place, 'report.json'), `${JSON.stringify(verifier.report, null, 4)}\n`);
    if (patch !== null) await writeFile(join(place, 'patch.diff'), patch);
  }
  await writeFile(join(directory, 'preds.json'), `${JSON.stringify(predictions, null, 2)}\n`);

  const ids = [...new Set(context.rows.map((row) => String(row.instance_id)))];
  const sets = {
    completed: [] as string[],
    incomplete: [] as string[],
    empty_patch: [] as string[],
    resolved: [] as string[],
    unresolved: [] as string[],
    error: [] as string[],
  };
  for (const id of ids) {
    const rollout = firstRollout.get(id);
    if (rollout === undefined) {
      sets.incomplete.push(id);
      continue;
    }
    const verifier = (gymFields(rollout).verifier ?? {}) as Record<string, unknown>;
    const patch = verifier.modelPatch;
    if (typeof patch !== 'string' || patch.trim() === '') {
      sets.empty_patch.push(id);
      continue;
    }
    const report = (verifier.report as Record<string, { resolved?: boolean }> | undefined)?.[id];
    if (report === undefined) {
      sets.error.push(id);
      continue;
    }
    sets.completed.push(id);
    (report.resolved === true ? sets.resolved : sets.unresolved).push(id);
  }
  const submitted = ids.filter((id) => firstRollout.has(id));
  const sorted = (list: string[]) => [...list].sort();
  const runReport = {
    total_instances: ids.length,
    submitted_instances: submitted.length,
    completed_instances: sets.completed.length,
    resolved_instances: sets.resolved.length,
    unresolved_instances: sets.unresolved.length,
    empty_patch_instances: sets.empty_patch.length,
    error_instances: sets.error.length,
    completed_ids: sorted(sets.completed),
    incomplete_ids: sorted(sets.incomplete),
    empty_patch_ids: sorted(sets.empty_patch),
    submitted_ids: sorted(submitted),
    resolved_ids: sorted(sets.resolved),
    unresolved_ids: sorted(sets.unresolved),
    error_ids: sorted(sets.error),
    schema_version: 2,
  };
  await writeFile(join(directory, 'run_report.json'), `${JSON.stringify(runReport, null, 4)}\n`);
}
