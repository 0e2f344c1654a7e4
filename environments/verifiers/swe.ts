/**
 * The SWE verifier: the agent's final state becomes a diff against the base commit (untracked
 * files included, binary-safe), and is graded in a fresh sandbox from the task image: apply the
 * patch (git apply, then with --reject, then patch with fuzz), apply the hidden test patch, run
 * the test command, parse the log, and judge FAIL_TO_PASS / PASS_TO_PASS as SWE-bench does.
 */
import type { GymClient } from '../../client/client.ts';
import { isGymError } from '../../core/errors.ts';
import { toLabelValue } from '../../core/schemas/common.ts';
import type { ExecResult } from '../../core/schemas/exec.ts';
import type { SandboxHandle } from '../../harnesses/harness.ts';
import { clientSandboxHandle } from '../../harnesses/sandbox-handle.ts';
import { gradeTests, parsePytestLog, type TestLogParser } from './pytest-log.ts';
import type { Verdict } from './verifier.ts';

export interface SweTask {
  instance_id: string;
  base_commit: string;
  image: string;
  workdir: string;
  test_command: string;
  test_patch: string;
  FAIL_TO_PASS: string[];
  PASS_TO_PASS: string[];
}

const MODEL_PATCH = '/tmp/gym-model.patch';
const TEST_PATCH = '/tmp/gym-test.patch';
/** How long the tests may run before the verdict is verifier_timeout. */
export const SWE_TEST_TIMEOUT_MS = 5 * 60_000;

/** SWE-bench rows keep the test lists as JSON strings; ours keep arrays. Accept both. */
export function testList(value: unknown): string[] {
  if (Array.isArray(value)) return value.map(String);
  if (typeof value === 'string' && value.trim() !== '') return JSON.parse(value) as string[];
  return [];
}

/** A SWE task as the verifier needs it, from a task or rollout row. */
export function sweTaskFromRow(row: Record<string, unknown>): SweTask {
  return {
    instance_id: String(row.instance_id),
    base_commit: String(row.base_commit),
    image: String(row.image),
    workdir: String(row.workdir ?? '/testbed'),
    test_command: String(row.test_command),
    test_patch: String(row.test_patch ?? ''),
    FAIL_TO_PASS: testList(row.FAIL_TO_PASS),
    PASS_TO_PASS: testList(row.PASS_TO_PASS),
  };
}

/** The agent's changes as a binary-safe diff against the base commit, untracked files included. */
export async function extractPatch(
  sandbox: SandboxHandle,
  task: Pick<SweTask, 'workdir' | 'base_commit'>,
): Promise<string> {
  const result = await sandbox.exec({
    command: `git add -A && git diff --cached --binary ${task.base_commit}`,
    cwd: task.workdir,
    timeoutMs: 60_000,
    maxOutputBytes: 64 * 1024 * 1024,
  });
  if (result.status !== 'ok' || result.exitCode !== 0)
    throw new Error(
      `could not read the agent's changes (${result.status}, exit ${result.exitCode}): ${result.stderr.slice(-500)}`,
    );
  if (result.stdoutTruncated)
    throw new Error('the agent changed more than 64 MiB; the patch cannot be graded');
  return result.stdout;
}

function infraStep(step: string, result: ExecResult): Verdict {
  return {
    outcome: 'infra_error',
    reward: 0,
    details: {
      reason:
        result.status === 'sandbox_gone'
          ? `the verifier sandbox went away while ${step}`
          : `${step} ended with status ${result.status}`,
    },
  };
}

export async function verifySwe(
  client: GymClient,
  task: SweTask,
  modelPatch: string,
  parser: TestLogParser = parsePytestLog,
): Promise<Verdict> {
  const base = { FAIL_TO_PASS: task.FAIL_TO_PASS, PASS_TO_PASS: task.PASS_TO_PASS };
  if (modelPatch.trim() === '') {
    return {
      outcome: 'reward',
      reward: 0,
      details: { ...base, resolved: false, reason: 'empty patch: the agent changed nothing' },
    };
  }
  let sandboxId: string | undefined;
  try {
    sandboxId = (
      await client.createSandbox({
        image: task.image,
        labels: {
          role: 'verifier',
          task: toLabelValue(task.instance_id),
        },
        ttlSeconds: 1800,
      })
    ).id;
    const sandbox = clientSandboxHandle(client, sandboxId);
    await sandbox.writeFile(MODEL_PATCH, Buffer.from(modelPatch));
    const applied = await sandbox.exec({
      command: `git apply --verbose ${MODEL_PATCH} || git apply --verbose --reject ${MODEL_PATCH} || patch --batch --fuzz=5 -p1 -i ${MODEL_PATCH}`,
      cwd: task.workdir,
      timeoutMs: 60_000,
    });
    // Only a command that ran to its end says whether the patch applies; a timeout or a lost
    // sandbox says nothing about the patch.
    if (applied.status !== 'ok') return infraStep('applying the model patch', applied);
    if (applied.exitCode !== 0) {
      return {
        outcome: 'reward',
        reward: 0,
        details: {
          ...base,
          resolved: false,
          reason: 'the patch does not apply',
          applyLog: `${applied.stdout}${applied.stderr}`.slice(-4000),
        },
      };
    }
    await sandbox.writeFile(TEST_PATCH, Buffer.from(task.test_patch));
    const tests = await sandbox.exec({
      command: `git apply --verbose ${TEST_PATCH}`,
      cwd: task.workdir,
      timeoutMs: 60_000,
    });
    if (tests.status !== 'ok') return infraStep('applying the test patch', tests);
    if (tests.exitCode !== 0) {
      // The hidden tests do not apply over the agent's changes (it edited the test files).
      return {
        outcome: 'reward',
        reward: 0,
        details: {
          ...base,
          resolved: false,
          reason: 'the test patch does not apply over the agent changes',
          applyLog: tests.stderr.slice(-4000),
        },
      };
    }
    const run = await sandbox.exec({
      command: task.test_command,
      cwd: task.workdir,
      timeoutMs: SWE_TEST_TIMEOUT_MS,
      maxOutputBytes: 8 * 1024 * 1024,
    });
    if (run.status === 'timeout')
      return {
        outcome: 'verifier_timeout',
        reward: 0,
        details: { ...base, reason: `tests ran past ${SWE_TEST_TIMEOUT_MS} ms` },
      };
    // A lost sandbox or a kill from outside cut the tests short; an OOM is the code under test.
    if (run.status === 'sandbox_gone' || run.status === 'killed') return infraStep('running the tests', run);
    const log = `${run.stdout}\n${run.stderr}`;
    const grade = gradeTests(parser(log), task.FAIL_TO_PASS, task.PASS_TO_PASS);
    return {
      outcome: 'reward',
      reward: grade.resolved ? 1 : 0,
      details: { ...grade, testExitCode: run.exitCode, testLogTail: log.slice(-4000) },
    };
  } catch (error) {
    return {
      outcome: 'infra_error',
      reward: 0,
      details: { reason: isGymError(error) ? `${error.code}: ${error.message}` : String(error) },
    };
  } finally {
    if (sandboxId !== undefined) await client.destroySandbox(sandboxId).catch(() => {});
  }
}
