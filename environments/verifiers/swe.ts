/**
 * The SWE verifier: the agent's final state becomes a diff against the base commit (untracked
 * files included, binary-safe), and is graded in a fresh sandbox from the task image: apply the
 * patch (git apply, then with --reject, then patch with fuzz), reset the files the hidden test
 * patch changes to the base commit, apply it, run the test command, parse the log, and judge
 * FAIL_TO_PASS / PASS_TO_PASS as SWE-bench does.
 *
 * Infra (retried, never a reward) is only what comes from outside the sandbox: the daemon or the
 * provider failing, the sandbox going away, and a kill of the model patch's apply (nothing of the
 * agent runs there yet). Whatever the agent's patch or files can do to a step is graded, reward 0
 * with the reason: a test run that kills itself or runs out of memory, an apply that the patch
 * makes time out or exhaust memory, a repo its git cannot diff.
 *
 * Each step is an exec of its own, and the test run's verdict rests on that exec's exit status as
 * the daemon sees it, held against what the runner says its statuses mean (runner-exit.ts): the
 * tests run the agent's code, which can print any `PASSED` line it likes.
 */
import type { GymClient } from '../../client/client.ts';
import { isGymError } from '../../core/errors.ts';
import { toLabelValue } from '../../core/schemas/common.ts';
import type { ExecResult } from '../../core/schemas/exec.ts';
import type { SandboxHandle } from '../../harnesses/harness.ts';
import { execWithPatchFile, fitsStdin } from '../../harnesses/patch-input.ts';
import { clientSandboxHandle } from '../../harnesses/sandbox-handle.ts';
import { filesBeforePatch } from './patch-files.ts';
import { gradeTests, parsePytestLog, type TestLogParser } from './pytest-log.ts';
import { distrustedRun, testRunnerOf } from './runner-exit.ts';
import { endedFromOutside, type Verdict } from './verifier.ts';

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

/** The agent's changes as a patch, or the verdict when there is no patch to grade. */
export type ExtractedPatch = { patch: string } | { verdict: Verdict };

/** The most a diff of the agent's changes may be (the daemon's cap on one exec's output). */
const MAX_PATCH_BYTES = 64 * 1024 * 1024;

/**
 * The agent's changes as a binary-safe diff against the base commit, untracked files included.
 *
 * This runs the sandbox's own git on the agent's files, so first every process the agent left is
 * stopped (when the provider can; without that the diff is still the agent's final state). What
 * then goes wrong is the agent's doing and scores 0 with the reason: a git that fails (removed
 * `.git`, a replaced binary, a hook or filter of its config), a diff past 64 MiB, and a diff that
 * times out, is killed or runs out of memory (with nothing else running, only the agent's repo
 * and tools can make git slow or make it die; calling that infra would let an agent turn any
 * rollout it would fail into a dropped one). Only a lost sandbox, and the daemon or provider
 * failing (a thrown error), are infra; so is a kill with no exit code, which says the engine lost
 * track of the command rather than that something in the sandbox killed it (that leaves 137).
 */
export async function extractPatch(
  sandbox: SandboxHandle,
  task: Pick<SweTask, 'workdir' | 'base_commit'>,
): Promise<ExtractedPatch> {
  if (sandbox.stopProcesses !== undefined) {
    try {
      await sandbox.stopProcesses();
    } catch (error) {
      if (!isGymError(error, 'CAPABILITY_UNSUPPORTED')) throw error;
    }
  }
  const result = await sandbox.exec({
    // No external diff program or text conversion: the patch is the files' real change.
    command: `git add -A && git diff --cached --binary --no-ext-diff --no-textconv ${task.base_commit}`,
    cwd: task.workdir,
    timeoutMs: 60_000,
    maxOutputBytes: MAX_PATCH_BYTES,
  });
  if (endedFromOutside(result))
    return {
      verdict: {
        outcome: 'infra_error',
        reward: 0,
        details: {
          reason:
            result.status === 'sandbox_gone'
              ? 'the agent sandbox went away while its changes were read'
              : 'reading the changes was killed with no exit code (the engine lost track of it)',
        },
      },
    };
  const unreadable = (why: string): ExtractedPatch => ({
    verdict: {
      outcome: 'reward',
      reward: 0,
      details: {
        resolved: false,
        reason: `the agent's changes could not be read: ${why}`,
        diffLog: result.stderr.slice(-2000),
      },
    },
  });
  if (result.status !== 'ok') return unreadable(`git diff ended with status ${result.status}`);
  if (result.exitCode !== 0) return unreadable(`git diff exited with ${result.exitCode}`);
  if (result.stdoutTruncated) return unreadable('the diff is larger than 64 MiB');
  return { patch: result.stdout };
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

/**
 * Applies the model patch in the grading sandbox as SWE-bench does (git apply, then with
 * --reject, then patch with fuzz): null when it applied, else the verdict.
 */
export async function applyModelPatch(
  sandbox: SandboxHandle,
  workdir: string,
  modelPatch: string,
  base: Record<string, unknown>,
): Promise<Verdict | null> {
  // Nothing of the agent has run in this fresh sandbox yet: its shell may write the patch file.
  const applied = await execWithPatchFile(sandbox, modelPatch, MODEL_PATCH, {
    command: `git apply --verbose ${MODEL_PATCH} || git apply --verbose --reject ${MODEL_PATCH} || patch --batch --fuzz=5 -p1 -i ${MODEL_PATCH}`,
    cwd: workdir,
    timeoutMs: 60_000,
  });
  // Nothing of the agent runs in this fresh sandbox yet, only git and patch reading its
  // patch: the patch can make them run out of time or memory (it is the agent's: reward 0), but
  // cannot signal them, so a kill came from outside (the host's OOM killer, the engine) and,
  // like a lost sandbox, says nothing about the patch.
  if (applied.status === 'sandbox_gone' || applied.status === 'killed')
    return infraStep('applying the model patch', applied);
  if (applied.status !== 'ok' || applied.exitCode !== 0) {
    return {
      outcome: 'reward',
      reward: 0,
      details: {
        ...base,
        resolved: false,
        reason:
          applied.status === 'ok'
            ? 'the patch does not apply'
            : `the patch does not apply: applying it ended with status ${applied.status}`,
        applyLog: `${applied.stdout}${applied.stderr}`.slice(-4000),
      },
    };
  }
  return null;
}

/**
 * Applies the hidden test patch over the agent's files. The patch goes straight to git on stdin
 * (no file: the agent's files are in place now, and nothing of the sandbox's writes it anywhere);
 * one too large for an exec request is uploaded (the upload refuses links the agent planted).
 */
function applyTestPatch(sandbox: SandboxHandle, task: SweTask): Promise<ExecResult> {
  const request = { cwd: task.workdir, timeoutMs: 60_000 };
  if (fitsStdin(task.test_patch))
    return sandbox.exec({ ...request, command: 'git apply --verbose -', stdin: task.test_patch });
  return sandbox
    .writeFile(TEST_PATCH, Buffer.from(task.test_patch))
    .then(() => sandbox.exec({ ...request, command: `git apply --verbose ${TEST_PATCH}` }));
}

const shellQuote = (value: string) => `'${value.replaceAll("'", `'\\''`)}'`;

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
    const notApplied = await applyModelPatch(sandbox, task.workdir, modelPatch, base);
    if (notApplied !== null) return notApplied;
    // SWE-bench puts the files the test patch changes back to the base commit first: an agent
    // that edited a test file must not make the hidden tests fail to apply (or run its version).
    const testFiles = filesBeforePatch(task.test_patch);
    if (testFiles.length > 0) {
      const reset = await sandbox.exec({
        command: `git checkout ${task.base_commit} -- ${testFiles.map(shellQuote).join(' ')}`,
        cwd: task.workdir,
        timeoutMs: 60_000,
      });
      // The agent's files are in place: its git config (hooks, filters) can make this fail.
      if (endedFromOutside(reset)) return infraStep('resetting the test files', reset);
      if (reset.status !== 'ok' || reset.exitCode !== 0)
        return {
          outcome: 'reward',
          reward: 0,
          details: {
            ...base,
            resolved: false,
            reason: `the test files could not be reset to the base commit (${reset.status}, exit ${reset.exitCode})`,
            applyLog: reset.stderr.slice(-4000),
          },
        };
    }
    const tests = await applyTestPatch(sandbox, task);
    // The agent's files are in place now, and the patch fallback can have written the repo's
    // git config (hooks, filters): a git that fails, dies or hangs here may be the agent's doing.
    if (endedFromOutside(tests)) return infraStep('applying the test patch', tests);
    if (tests.status !== 'ok' || tests.exitCode !== 0) {
      // The hidden tests do not apply over the agent's changes (it edited the test files).
      return {
        outcome: 'reward',
        reward: 0,
        details: {
          ...base,
          resolved: false,
          reason:
            tests.status === 'ok'
              ? 'the test patch does not apply over the agent changes'
              : `the test patch does not apply over the agent changes: applying it ended with status ${tests.status}`,
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
    // Only a lost sandbox (or a kill the engine cannot account for) is the infrastructure's. The
    // tests run the agent's code, which can kill its own test run (`os.kill(os.getpid(), 9)` in a
    // conftest.py, exit 137) or exhaust its memory: that run is graded, reward 0, since the
    // runner never gave its verdict (whatever the log printed before says).
    if (endedFromOutside(run)) return infraStep('running the tests', run);
    const log = `${run.stdout}\n${run.stderr}`;
    const statuses = parser(log);
    // The log is the agent's code's to write; the exit status is the runner's own. A run whose
    // status says it did not pass (or did not finish) grades every listed test as failed.
    const distrust = distrustedRun(testRunnerOf(task.test_command), run, statuses);
    const grade = gradeTests(distrust === null ? statuses : new Map(), task.FAIL_TO_PASS, task.PASS_TO_PASS);
    return {
      outcome: 'reward',
      reward: grade.resolved ? 1 : 0,
      details: {
        ...grade,
        ...(distrust === null ? {} : { reason: distrust }),
        ...(run.status === 'ok' ? {} : { testStatus: run.status }),
        testExitCode: run.exitCode,
        testLogTail: log.slice(-4000),
      },
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
