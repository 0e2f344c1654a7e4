import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { GymClient } from '../../client/client.ts';
import { silentLogger } from '../../core/logger.ts';
import { HarnessRegistry } from '../../harnesses/registry.ts';
import { type LoadedEnvironment, loadEnvironment, readRows } from '../environment.ts';
import { runEval } from '../runner/eval.ts';
import { readJsonl } from '../runner/files.ts';
import { gymFields } from '../runner/rollout-line.ts';
import { builtInKinds, loadKind, parseRow } from './kind.ts';

// Neither kind below asks for a sandbox, so the runner never calls the daemon.
const noDaemon = {} as GymClient;
let directory = '';
beforeAll(async () => {
  directory = await mkdtemp(join(tmpdir(), 'gym-kinds-'));
});
afterAll(async () => {
  await rm(directory, { recursive: true, force: true });
});

async function run(
  environment: LoadedEnvironment,
  rows: Array<Record<string, unknown>>,
  harnessName: string,
) {
  const output = join(directory, `${environment.name}-${harnessName}-${rows.length}.jsonl`);
  const summary = await runEval({
    client: noDaemon,
    environment,
    rows,
    harness: await new HarnessRegistry().create(harnessName),
    harnessName,
    modelName: 'm',
    numRepeats: 2,
    concurrency: 2,
    output,
    resume: false,
    maxInfraAttempts: 1,
    logger: silentLogger,
  });
  return {
    summary,
    rollouts: await readJsonl(output),
    failures: await readJsonl(output.replace(/\.jsonl$/, '_failures.jsonl')),
  };
}

describe('environment kinds', () => {
  it('lists the built-in kinds and names them when a kind is unknown', async () => {
    expect(await builtInKinds()).toEqual(expect.arrayContaining(['exact', 'script', 'swe']));
    await expect(loadKind('no-such-kind', directory)).rejects.toThrow(/built in: .*exact.*script.*swe/);
    await expect(loadKind('../../etc', directory)).rejects.toThrow(/cannot load environment kind/);
    await expect(loadKind('Bad Name', directory)).rejects.toThrow(/not a kind name/);
  });

  it('runs a kind that lives in its environment folder, with no edit of the runner', async () => {
    const environment = await loadEnvironment(
      join(import.meta.dirname, '../../test/fixtures/word-count-env'),
    );
    const rows = await readRows(environment.dataPath);
    const oracle = await run(environment, rows, 'oracle');
    expect(oracle.summary.metrics['mean/reward']).toBe(1);
    expect(oracle.rollouts[0]).toMatchObject({
      id: 'w1',
      _gym: { verifier: { expected: '3', submitted: '3' } },
    });
    expect((await run(environment, rows, 'noop')).summary.metrics['mean/reward']).toBe(0);
  });

  it('puts a row that lacks a field in the failures file, naming it, and runs the others', async () => {
    const environment = await loadEnvironment('mcqa');
    const [good, other] = await readRows(environment.dataPath);
    const { expected_answer: _dropped, ...missing } = good!;
    const { summary, rollouts, failures } = await run(environment, [missing, other!], 'oracle');
    // Only the good row ran (twice); the bad one is never a reward.
    expect(summary.rollouts).toBe(2);
    expect(rollouts.every((row) => row.id === other!.id)).toBe(true);
    expect(failures).toHaveLength(1);
    expect(failures[0]).toMatchObject({ _ng_failure_class: 'invalid_row', _ng_task_index: 0 });
    expect(String(gymFields(failures[0]!).reason)).toMatch(
      /row 1 \(q1\) is not a valid exact task: expected_answer/,
    );
    expect(summary.failures).toBe(1);
  });

  it('refuses a run whose every row is invalid before anything starts', async () => {
    const environment = await loadEnvironment('mcqa');
    await expect(run(environment, [{ id: 'x', question: 'q?' }], 'oracle')).rejects.toThrow(
      /no row is a valid exact task/,
    );
  });

  it('names the field of a SWE row without a test command (once scored 0 with no error)', async () => {
    const environment = await loadEnvironment('swe-mini');
    const [row] = await readRows(environment.dataPath);
    expect(() => parseRow(environment.implementation, row!, 0)).not.toThrow();
    const { test_command: _dropped, ...missing } = row!;
    expect(() => parseRow(environment.implementation, missing, 4)).toThrow(/row 5 .*test_command/);
    expect(() => parseRow(environment.implementation, { ...row!, FAIL_TO_PASS: '[not json' }, 0)).toThrow(
      /FAIL_TO_PASS/,
    );
  });

  it('refuses a script row whose tests folder leaves the environment', async () => {
    const environment = await loadEnvironment('terminal');
    const [row] = await readRows(environment.dataPath);
    expect(() => parseRow(environment.implementation, row!, 0)).not.toThrow();
    expect(() => parseRow(environment.implementation, { ...row!, tests: '../../../etc' }, 0)).toThrow(
      /tests/,
    );
  });
});
