/**
 * The swebench kind end to end against real Docker, on a SWE-bench-format row made from a real
 * project's own test suite (toolz, test/fixtures/swebench-toolz.ts) in an image named by the
 * environment's template: the gold patch scores 1, an empty or a wrong patch 0, an agent that
 * edited the test file the test patch changes still scores 1 (the reset), SWE-bench's report.json
 * is written, a bad row is a failure that names its field, and a missing image says how to get it.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { runCli } from '../../../cli/program.ts';
import { GymClient } from '../../../client/client.ts';
import { silentLogger } from '../../../core/logger.ts';
import { HarnessRegistry } from '../../../harnesses/registry.ts';
import { startTestDaemon, type TestDaemon } from '../../../test/daemon-harness.ts';
import { dockerTestEnvironment } from '../../../test/docker-available.ts';
import {
  buildToolzImage,
  makeToolzInstance,
  patchAgainstBase,
  TOOLZ_INSTANCE_ID,
  TOOLZ_OPTIONS,
  TOOLZ_TEST_FILE,
  type ToolzInstance,
  writeToolzEnvironment,
} from '../../../test/fixtures/swebench-toolz.ts';
import { loadEnvironment, readRows } from '../../environment.ts';
import { runEval } from '../../runner/eval.ts';
import { readJsonl } from '../../runner/files.ts';
import { reverifyRollout } from '../../runner/reverify.ts';
import { gymFields } from '../../runner/rollout-line.ts';

const { docker, skipReason } = await dockerTestEnvironment();

describe.skipIf(skipReason !== undefined)('SWE-bench rows as published, against real Docker', () => {
  let directory = '';
  let instance: ToolzInstance;
  let daemon: TestDaemon;
  let client: GymClient;
  beforeAll(async () => {
    directory = await mkdtemp(join(tmpdir(), 'gym-swebench-'));
    instance = makeToolzInstance();
    await buildToolzImage(docker, instance);
    daemon = await startTestDaemon(
      { namespace: `swebench-${randomBytes(3).toString('hex')}` },
      { listen: true },
    );
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
  }, 300_000);
  afterAll(async () => {
    await daemon?.stop({ destroy: true });
    await rm(directory, { recursive: true, force: true });
  });

  const run = async (environmentDirectory: string, harnessName: string, output: string) =>
    runEval({
      client,
      environment: await loadEnvironment(environmentDirectory),
      rows: await readRows(join(environmentDirectory, 'data/instances.jsonl')),
      harness: await new HarnessRegistry().create(harnessName),
      harnessName,
      modelName: 'none',
      numRepeats: 1,
      concurrency: 1,
      output,
      resume: false,
      maxInfraAttempts: 1,
      logger: silentLogger,
    });

  it('scores the gold patch 1 and an empty patch 0, writes report.json, and names a bad row', async () => {
    const row = instance.row;
    const failToPass = JSON.parse(String(row.FAIL_TO_PASS)) as string[];
    const passToPass = JSON.parse(String(row.PASS_TO_PASS)) as string[];
    expect(passToPass.length).toBeGreaterThan(40);
    const badRow = { ...row, instance_id: 'pytoolz__toolz-2', FAIL_TO_PASS: '["unclosed' };
    const environmentDirectory = join(directory, 'env');
    await writeToolzEnvironment(environmentDirectory, [row, badRow]);

    const oracle = join(directory, 'oracle.jsonl');
    await run(environmentDirectory, 'oracle', oracle);
    const [rollout] = await readJsonl(oracle);
    expect(await readJsonl(oracle)).toHaveLength(1);
    expect(rollout).toMatchObject({
      instance_id: TOOLZ_INSTANCE_ID,
      reward: 1,
      // NeMo Gym's swebench fields at the top level; ours under _gym.
      resolved: true,
      evaluation_completed: true,
      model_patch: row.patch,
      _gym: {
        outcome: 'reward',
        sandbox: { image: instance.image },
        verifier: { resolution: 'RESOLVED_FULL', resolved: true },
      },
    });
    const failures = await readJsonl(join(directory, 'oracle_failures.jsonl'));
    expect(failures.map((failure) => failure._ng_failure_class)).toEqual(['invalid_row']);
    expect(String(gymFields(failures[0]!).reason)).toMatch(
      /row 2 \(pytoolz__toolz-2\).*FAIL_TO_PASS: must be a JSON-encoded list/,
    );

    const report = JSON.parse(
      await readFile(join(directory, `oracle_swebench/${TOOLZ_INSTANCE_ID}/report.json`), 'utf8'),
    );
    expect(report).toEqual({
      [TOOLZ_INSTANCE_ID]: {
        patch_is_None: false,
        patch_exists: true,
        patch_successfully_applied: true,
        resolved: true,
        tests_status: {
          FAIL_TO_PASS: { success: failToPass, failure: [] },
          PASS_TO_PASS: { success: passToPass, failure: [] },
          FAIL_TO_FAIL: { success: [], failure: [] },
          PASS_TO_FAIL: { success: [], failure: [] },
        },
      },
    });
    const runReport = JSON.parse(await readFile(join(directory, 'oracle_swebench/run_report.json'), 'utf8'));
    expect(runReport).toMatchObject({
      total_instances: 2,
      completed_instances: 1,
      resolved_ids: [TOOLZ_INSTANCE_ID],
      incomplete_ids: ['pytoolz__toolz-2'],
    });
    const predictions = JSON.parse(await readFile(join(directory, 'oracle_swebench/preds.json'), 'utf8'));
    expect(predictions[TOOLZ_INSTANCE_ID]).toEqual({
      instance_id: TOOLZ_INSTANCE_ID,
      model_name_or_path: 'oracle',
      model_patch: row.patch,
    });

    // `gym eval reverify` grades the stored patch again and writes the report beside its output.
    const reverified = join(directory, 'reverified.jsonl');
    const reverifyArgs = [
      'eval',
      'reverify',
      '--input',
      oracle,
      '--output',
      reverified,
      '--env',
      environmentDirectory,
    ];
    const quiet = { stdout: new PassThrough(), stderr: new PassThrough(), env: {} };
    expect(await runCli([...reverifyArgs, '--state-dir', daemon.stateDir], quiet)).toBe(0);
    expect(await readJsonl(reverified)).toMatchObject([{ _gym: { reverified: true }, reward: 1 }]);
    const again = JSON.parse(
      await readFile(join(directory, `reverified_swebench/${TOOLZ_INSTANCE_ID}/report.json`), 'utf8'),
    );
    expect(again).toEqual(report);

    const noop = join(directory, 'noop.jsonl');
    await run(environmentDirectory, 'noop', noop);
    expect(await readJsonl(noop)).toMatchObject([
      { reward: 0, _gym: { outcome: 'reward', verifier: { swebench: 'empty_patch' } } },
    ]);
    expect(
      JSON.parse(await readFile(join(directory, 'noop_swebench/run_report.json'), 'utf8')),
    ).toMatchObject({
      empty_patch_ids: [TOOLZ_INSTANCE_ID],
      resolved_ids: [],
    });

    // Graded again with other patches, no agent: a wrong fix scores 0 with the failing test named;
    // the gold fix plus an edit of the test file the test patch changes still scores 1 (reset).
    const environment = await loadEnvironment(environmentDirectory);
    const wrong = patchAgainstBase(instance, {
      'toolz/itertoolz.py': instance.files['toolz/itertoolz.py']!.replace('d[item] = 1\n', 'd[item] = 2\n'),
    });
    expect(await reverifyRollout(client, environment, { ...rollout!, model_patch: wrong })).toMatchObject({
      reward: 0,
      resolved: false,
      model_patch: wrong,
      _gym: {
        reverified: true,
        verifier: {
          resolution: 'RESOLVED_NO',
          FAIL_TO_PASS: { success: [], failure: failToPass },
          report: { [TOOLZ_INSTANCE_ID]: { patch_successfully_applied: true, resolved: false } },
        },
      },
    });
    const testFile = instance.files[TOOLZ_TEST_FILE]!;
    expect(testFile).toContain('\ndef test_reduceby():');
    const touchedTests = patchAgainstBase(instance, {
      'toolz/itertoolz.py': instance.files['toolz/itertoolz.py']!.replace('d[item] = 1\n', 'd[item] += 1\n'),
      [TOOLZ_TEST_FILE]: testFile.replace(
        '\ndef test_reduceby():',
        '\ndef test_reduceby_as_the_agent_wrote_it():',
      ),
    });
    expect(
      await reverifyRollout(client, environment, { ...rollout!, model_patch: touchedTests }),
    ).toMatchObject({ reward: 1, _gym: { reverified: true, verifier: { resolution: 'RESOLVED_FULL' } } });
  }, 240_000);

  it('stops with IMAGE_NOT_FOUND saying how to get the image when the template names none', async () => {
    const environmentDirectory = join(directory, 'env-missing');
    await writeToolzEnvironment(environmentDirectory, [instance.row], {
      ...TOOLZ_OPTIONS,
      imageTemplate: 'gym/sweb.eval.{arch}.{instance_id_lower}:not-built',
    });
    await expect(run(environmentDirectory, 'noop', join(directory, 'missing.jsonl'))).rejects.toMatchObject({
      code: 'IMAGE_NOT_FOUND',
      message: expect.stringMatching(/pytoolz__toolz-1:not-built.*never pulled.*--image-template/),
    });
  }, 60_000);
});
