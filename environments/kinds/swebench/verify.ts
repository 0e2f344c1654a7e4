/**
 * Grades a model patch for a SWE-bench row in a fresh sandbox from the row's image, as SWE-bench's
 * harness does: the model patch applied (git apply, --reject, patch --fuzz), the test files reset
 * and the test patch applied, the repository's test command run on the test patch's files, the
 * log read by the repository's parser, and the report judged.
 *
 * Each step is an exec of its own, so the verdict rests on what the daemon sees of each (exit
 * status, output), never on text the agent's code could write: the tests run the agent's code,
 * which can read and rewrite a running script through /proc, print marker lines, kill its parent
 * shell. The test run's log is its exec's stdout, its exit status the runner's own, held against
 * what the runner says its statuses mean (verifiers/runner-exit.ts).
 *
 * Reward 1 only for RESOLVED_FULL (SWE-bench's `resolved`); RESOLVED_PARTIAL is 0 with the status
 * said. Only faults from outside the sandbox are infra (see verifiers/swe.ts for the reasoning).
 */
import type { GymClient } from '../../../client/client.ts';
import { GymError, isGymError } from '../../../core/errors.ts';
import { toLabelValue } from '../../../core/schemas/common.ts';
import type { ExecResult } from '../../../core/schemas/exec.ts';
import { shellQuote } from '../../../core/shell-quote.ts';
import type { SandboxHandle } from '../../../harnesses/harness.ts';
import { fitsStdin } from '../../../harnesses/patch-input.ts';
import { clientSandboxHandle } from '../../../harnesses/sandbox-handle.ts';
import { filesBeforePatch } from '../../verifiers/patch-files.ts';
import { type TestRunner, testRunnerOf } from '../../verifiers/runner-exit.ts';
import { applyModelPatch } from '../../verifiers/swe.ts';
import { endedFromOutside, type Verdict } from '../../verifiers/verifier.ts';
import { gradeLog, type InstanceReport, preparationScript, testScript } from './grading.ts';
import { LOG_PARSERS } from './log-parsers.ts';
import { type RepositorySpec, testDirectives } from './repositories.ts';
import { missingImageHint, SWE_BENCH_WORKDIR, type SweBenchRow } from './row.ts';

const TEST_PATCH = '/tmp/gym-test.patch';
/** Resetting the test files and applying the test patch: git on a few files, seconds at most. */
const PREPARATION_TIMEOUT_MS = 120_000;
/** SWE-bench's own default is 1800 s; ours is shorter and set per environment. */
export const DEFAULT_TEST_TIMEOUT_SEC = 900;

export interface SweBenchGrading {
  row: SweBenchRow;
  image: string;
  spec: RepositorySpec;
  testTimeoutSec: number;
}

/** The verdict's details: the resolution, SWE-bench's report entry (when it writes one), the log tail. */
function graded(
  row: SweBenchRow,
  reward: number,
  details: Record<string, unknown>,
  report?: InstanceReport,
): Verdict {
  return {
    outcome: 'reward',
    reward,
    details: {
      resolved: reward === 1,
      ...details,
      ...(report === undefined ? {} : { report: { [row.instance_id]: report } }),
    },
  };
}

/**
 * The repository's test command and the test patch's files, each quoted: the file names come from
 * the row's patch and must not become shell syntax.
 */
export function testCommandLine(spec: RepositorySpec, row: Pick<SweBenchRow, 'repo' | 'test_patch'>): string {
  return [spec.testCommand, ...testDirectives(row.repo, row.test_patch).map(shellQuote)].join(' ');
}

/** The runner whose exit statuses judge the run: the repository's, else pytest when the command runs it. */
function runnerOf(spec: RepositorySpec, testCommand: string): { runner?: TestRunner } {
  const runner = spec.testRunner ?? testRunnerOf(testCommand);
  return runner === undefined ? {} : { runner };
}

/**
 * Resets the test files to the base commit and applies the test patch, in an exec of its own
 * whose exit status is `git apply`'s. The patch goes on stdin (one too large for an exec request
 * is uploaded; the upload refuses links the agent planted).
 */
async function prepareTests(sandbox: SandboxHandle, row: SweBenchRow, workdir: string): Promise<ExecResult> {
  const onStdin = fitsStdin(row.test_patch);
  if (!onStdin) await sandbox.writeFile(TEST_PATCH, Buffer.from(row.test_patch));
  const script = preparationScript({
    baseCommit: row.base_commit,
    testFiles: filesBeforePatch(row.test_patch),
    ...(onStdin ? {} : { testPatchPath: TEST_PATCH }),
  });
  return sandbox.exec({
    argv: ['bash', '-c', script],
    cwd: workdir,
    timeoutMs: PREPARATION_TIMEOUT_MS,
    ...(onStdin ? { stdin: row.test_patch } : {}),
  });
}

export async function gradeSweBench(
  client: GymClient,
  grading: SweBenchGrading,
  modelPatch: string,
): Promise<Verdict> {
  const { row, spec } = grading;
  // SWE-bench never runs an empty prediction: it is an "empty patch" instance, unresolved.
  if (modelPatch.trim() === '')
    return graded(row, 0, {
      resolution: 'RESOLVED_NO',
      swebench: 'empty_patch',
      reason: 'empty patch: the agent changed nothing',
    });
  let sandboxId: string | undefined;
  try {
    try {
      sandboxId = (
        await client.createSandbox({
          image: grading.image,
          labels: { role: 'verifier', task: toLabelValue(row.instance_id) },
          ttlSeconds: grading.testTimeoutSec + 600,
        })
      ).id;
    } catch (error) {
      if (isGymError(error, 'IMAGE_NOT_FOUND'))
        throw new GymError('IMAGE_NOT_FOUND', missingImageHint(grading.image, row.instance_id), {
          cause: error,
        });
      throw error;
    }
    const sandbox = clientSandboxHandle(client, sandboxId);
    const workdir = row.workdir ?? SWE_BENCH_WORKDIR;
    const notApplied = await applyModelPatch(sandbox, workdir, modelPatch, {});
    // SWE-bench writes no report for a patch that does not apply: an error instance.
    if (notApplied !== null)
      return notApplied.outcome === 'reward'
        ? graded(row, 0, { ...notApplied.details, resolution: 'RESOLVED_NO', swebench: 'error' })
        : notApplied;
    const prepared = await prepareTests(sandbox, row, workdir);
    if (endedFromOutside(prepared))
      return {
        outcome: 'infra_error',
        reward: 0,
        details: {
          reason:
            prepared.status === 'sandbox_gone'
              ? 'the verifier sandbox went away while the test patch was applied'
              : 'applying the test patch was killed with no exit code (the engine lost track of it)',
        },
      };
    // The agent's files are in place, so whatever stops git here (its changes to the test files, a
    // repository git cannot handle) is its doing. The report says nothing was graded.
    if (prepared.status !== 'ok' || prepared.exitCode !== 0)
      return graded(
        row,
        0,
        {
          resolution: 'RESOLVED_NO',
          swebench: 'graded',
          reason:
            prepared.status === 'ok'
              ? 'the test patch does not apply'
              : `the test patch does not apply: applying it ended with status ${prepared.status}`,
          applyLog: `${prepared.stdout}${prepared.stderr}`.slice(-4000),
        },
        gradeLog(null, modelPatch, LOG_PARSERS[spec.logParser]!, row.FAIL_TO_PASS, row.PASS_TO_PASS).report,
      );
    const testCommand = testCommandLine(spec, row);
    const run = await sandbox.exec({
      argv: [
        'bash',
        '-c',
        testScript({
          workdir,
          testCommand,
          ...(spec.evalCommands === undefined ? {} : { evalCommands: spec.evalCommands }),
        }),
      ],
      cwd: workdir,
      timeoutMs: grading.testTimeoutSec * 1000,
      maxOutputBytes: 8 * 1024 * 1024,
    });
    if (run.status === 'timeout')
      return {
        outcome: 'verifier_timeout',
        reward: 0,
        details: {
          reason: `the evaluation ran past ${grading.testTimeoutSec} s`,
          testLogTail: run.stdout.slice(-4000),
        },
      };
    if (endedFromOutside(run))
      return {
        outcome: 'infra_error',
        reward: 0,
        details: {
          reason:
            run.status === 'sandbox_gone'
              ? 'the verifier sandbox went away while the tests ran'
              : 'the tests were killed with no exit code (the engine lost track of them)',
        },
      };
    // stdout is the test log (the test command's output, both its streams); stderr holds only what
    // set up its environment, before it.
    const grade = gradeLog(
      {
        log: run.stdout,
        status: run.status,
        exitCode: run.exitCode,
        ...runnerOf(spec, testCommand),
      },
      modelPatch,
      LOG_PARSERS[spec.logParser]!,
      row.FAIL_TO_PASS,
      row.PASS_TO_PASS,
    );
    return graded(
      row,
      grade.status === 'RESOLVED_FULL' ? 1 : 0,
      {
        resolution: grade.status,
        swebench: 'graded',
        ...(grade.report.tests_status === undefined
          ? { FAIL_TO_PASS: row.FAIL_TO_PASS, PASS_TO_PASS: row.PASS_TO_PASS }
          : {
              FAIL_TO_PASS: grade.report.tests_status.FAIL_TO_PASS,
              PASS_TO_PASS: grade.report.tests_status.PASS_TO_PASS,
            }),
        ...(grade.reason === undefined ? {} : { reason: grade.reason }),
        ...(run.status === 'ok' ? {} : { testStatus: run.status }),
        testExitCode: run.exitCode,
        testLogTail: `${run.stderr}${run.stdout}`.slice(-4000),
      },
      grade.report,
    );
  } catch (error) {
    if (isGymError(error, 'IMAGE_NOT_FOUND')) throw error;
    return {
      outcome: 'infra_error',
      reward: 0,
      details: { reason: isGymError(error) ? `${error.code}: ${error.message}` : String(error) },
    };
  } finally {
    if (sandboxId !== undefined) await client.destroySandbox(sandboxId).catch(() => {});
  }
}
