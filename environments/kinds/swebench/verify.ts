/**
 * Grades a model patch for a SWE-bench row in a fresh sandbox from the row's image, as SWE-bench's
 * harness does: the model patch applied (git apply, --reject, patch --fuzz), then the evaluation
 * script (test files reset, test patch, the repository's test command on the test patch's files,
 * markers, exit code), the log read by the repository's parser, and the report judged.
 *
 * Reward 1 only for RESOLVED_FULL (SWE-bench's `resolved`); RESOLVED_PARTIAL is 0 with the status
 * said. Only faults from outside the sandbox are infra (see verifiers/swe.ts for the reasoning).
 */
import { randomBytes } from 'node:crypto';
import type { GymClient } from '../../../client/client.ts';
import { GymError, isGymError } from '../../../core/errors.ts';
import { toLabelValue } from '../../../core/schemas/common.ts';
import { clientSandboxHandle } from '../../../harnesses/sandbox-handle.ts';
import { shellQuote } from '../../../providers/shared/shell.ts';
import { filesBeforePatch } from '../../verifiers/patch-files.ts';
import { applyModelPatch } from '../../verifiers/swe.ts';
import { endedFromOutside, type Verdict } from '../../verifiers/verifier.ts';
import { evalScript, gradeLog, type InstanceReport } from './grading.ts';
import { LOG_PARSERS } from './log-parsers.ts';
import { type RepositorySpec, testDirectives } from './repositories.ts';
import { missingImageHint, SWE_BENCH_WORKDIR, type SweBenchRow } from './row.ts';

const TEST_PATCH = '/tmp/gym-test.patch';
const EVAL_SCRIPT = '/tmp/gym-eval.sh';
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
    await sandbox.writeFile(TEST_PATCH, Buffer.from(row.test_patch));
    const nonce = randomBytes(12).toString('hex');
    const script = evalScript({
      workdir,
      baseCommit: row.base_commit,
      testPatchPath: TEST_PATCH,
      testFiles: filesBeforePatch(row.test_patch),
      testCommand: testCommandLine(spec, row),
      nonce,
      ...(spec.evalCommands === undefined ? {} : { evalCommands: spec.evalCommands }),
    });
    await sandbox.writeFile(EVAL_SCRIPT, Buffer.from(script));
    const run = await sandbox.exec({
      command: `bash ${EVAL_SCRIPT}`,
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
    // The script sends everything to stdout in order; stderr holds only what bash said before that.
    const log = `${run.stdout}${run.stderr}`;
    const parser = LOG_PARSERS[spec.logParser]!;
    const grade = gradeLog(log, nonce, modelPatch, parser, row.FAIL_TO_PASS, row.PASS_TO_PASS);
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
        testLogTail: log.slice(-4000),
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
