import { access, writeFile } from 'node:fs/promises';
import type { GymClient } from '../../../client/client.ts';
import { GymError } from '../../../core/errors.ts';
import { loadEnvironment } from '../../../environments/environment.ts';
import { writeMetrics } from '../../../environments/runner/eval.ts';
import { outputPaths, readJsonl } from '../../../environments/runner/files.ts';
import { joinInputs, reverifyRollout } from '../../../environments/runner/reverify.ts';
import { gymFields } from '../../../environments/runner/rollout-line.ts';
import type { CommandOf } from '../../command.ts';
import { connect, resolveStateDir } from '../../connect.ts';
import { formatDuration, remainingAtRate } from '../../progress.ts';
import type { evalReverify } from './definitions.ts';

/** A client for grading that needs no sandbox: any use of it is a clear error, never a silent one. */
function withoutDaemon(): GymClient {
  return new Proxy({} as GymClient, {
    get(_target, property) {
      throw new GymError(
        'DAEMON_UNAVAILABLE',
        `reverifying these rollouts asked the daemon for ${String(property)}; start one with \`gym daemon start\``,
      );
    },
  });
}

export const evalReverifyCommand: CommandOf<typeof evalReverify> = {
  async run({ options: values, env, stdout, stderr }) {
    const environment = await loadEnvironment(values.env);
    const rows = await readJsonl(values.input);
    if (rows.length === 0) throw new GymError('VALIDATION_FAILED', `${values.input} holds no rollouts`);
    const beside = outputPaths(values.input).materialized;
    const inputsPath =
      values.inputs ??
      (await access(beside).then(
        () => beside,
        () => undefined,
      ));
    const inputs = inputsPath === undefined ? [] : joinInputs(rows, await readJsonl(inputsPath));
    // A kind whose rows get no sandbox (questions) grades without one: no daemon needed.
    const kind = environment.implementation;
    const needsSandbox = rows.some((row, index) => {
      try {
        return kind.image({ ...row, ...inputs[index] }, environment) !== null;
      } catch {
        return true;
      }
    });
    const client = needsSandbox ? await connect(resolveStateDir(values.stateDir, env)) : withoutDaemon();
    const results: Array<Record<string, unknown>> = [];
    let changed = 0;
    const started = Date.now();
    for (const [index, row] of rows.entries()) {
      const result = await reverifyRollout(client, environment, row, inputs[index]);
      if (gymFields(result).reverified === true && result.reward !== row.reward) changed += 1;
      results.push(result);
      const elapsedMs = Date.now() - started;
      const leftMs = remainingAtRate(elapsedMs, index + 1, rows.length);
      stderr.write(
        `reverified ${index + 1}/${rows.length}, ${formatDuration(elapsedMs)} elapsed${index + 1 < rows.length && leftMs !== undefined ? `, about ${formatDuration(leftMs)} left` : ''}\n`,
      );
    }
    await writeFile(values.output, results.map((row) => `${JSON.stringify(row)}\n`).join(''));
    const harnessName = String((rows[0]?.agent_ref as { name?: string } | undefined)?.name ?? 'unknown');
    // NeMo Gym's older files carry no indices: each line is then a task of its own.
    const indexed = results.map((row, position) =>
      typeof row._ng_task_index === 'number'
        ? row
        : { ...row, _ng_task_index: position, _ng_rollout_index: 0 },
    );
    const metrics = await writeMetrics(
      outputPaths(values.output).metrics,
      indexed,
      harnessName,
      [],
      new Map(),
      environment.implementation,
    );
    // The kind's own reports (SWE-bench's report.json) for the regraded rollouts, beside NEW.jsonl.
    await environment.implementation.writeReports?.({
      output: values.output,
      rows: results,
      rollouts: results,
      harnessName,
    });
    stdout.write(
      `${results.length} rollouts reverified, ${changed} rewards changed; mean/reward ${metrics['mean/reward']?.toFixed(3)}\n`,
    );
    return 0;
  },
};
