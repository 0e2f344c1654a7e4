/**
 * Only a fault outside the sandbox is infra: what the agent's patch or its files do to the
 * verifier's own commands (a test run that kills itself, a repo git cannot read) is graded.
 */
import { describe, expect, it } from 'vitest';
import type { GymClient } from '../../client/client.ts';
import { GymError } from '../../core/errors.ts';
import type { ExecRequestInput, ExecResult } from '../../core/schemas/exec.ts';
import type { SandboxHandle } from '../../harnesses/harness.ts';
import { STDIN_PATCH_MAX_BYTES } from '../../harnesses/patch-input.ts';
import { execResult } from '../../test/fixtures/exec-result.ts';
import { extractPatch, type SweTask, verifySwe } from './swe.ts';

const TEST_ID = 'tests/test_fix.py::test_fix';
const TASK: SweTask = {
  instance_id: 'fake-1',
  base_commit: 'abc123',
  image: 'gym/fake:1',
  workdir: '/testbed',
  test_command: 'pytest -rA',
  test_patch: 'diff --git a/tests/test_fix.py b/tests/test_fix.py\n',
  FAIL_TO_PASS: [TEST_ID],
  PASS_TO_PASS: [],
};
const PATCH = 'diff --git a/x b/x\n';

const result = execResult;

/** A daemon whose verifier sandbox answers each command as `answer` says (default: all is well). */
function fakeClient(answer: (command: string) => ExecResult | null): GymClient {
  const fake = {
    createSandbox: async () => ({ id: 'sbx-verifier' }),
    destroySandbox: async () => {},
    writeFile: async () => {},
    exec: async (_id: string, request: ExecRequestInput) => {
      const command = request.command ?? '';
      return (
        answer(command) ??
        result('ok', 0, command === TASK.test_command ? { stdout: `PASSED ${TEST_ID}\n` } : {})
      );
    },
  };
  return fake as unknown as GymClient;
}

const atTests = (answer: ExecResult) => (command: string) => (command === TASK.test_command ? answer : null);
/** The model patch's apply (its file written by the same command); the test patch's, from stdin. */
const MODEL_APPLY = 'git apply --verbose /tmp/gym-model.patch';
const TEST_APPLY = 'git apply --verbose -';
const atApply = (apply: string, answer: ExecResult) => (command: string) =>
  command === apply || (apply === MODEL_APPLY && command.includes(apply)) ? answer : null;

describe('SWE verifier: the test run is the patch doing', () => {
  it('grades a fault-free run 1 (the baseline)', async () => {
    expect(
      await verifySwe(
        fakeClient(() => null),
        TASK,
        PATCH,
      ),
    ).toMatchObject({ outcome: 'reward', reward: 1 });
  });

  it.each([
    [
      'killed (the patch SIGKILLed pytest from conftest.py)',
      result('killed', 137, { stdout: 'collecting ...\n' }),
    ],
    ['oom (the code under test exhausted memory)', result('oom', 137)],
    ['ok with exit 137', result('ok', 137)],
  ])('grades a test run that ended %s: reward 0, with the reason', async (_name, answer) => {
    const verdict = await verifySwe(fakeClient(atTests(answer)), TASK, PATCH);
    expect(verdict).toMatchObject({ outcome: 'reward', reward: 0 });
    expect(verdict.details.resolved).toBe(false);
    if (answer.status !== 'ok') expect(String(verdict.details.reason)).toContain(answer.status);
  });

  it('does not grade the log of a killed run: the tested code can print PASSED lines and kill its runner', async () => {
    const verdict = await verifySwe(
      fakeClient(atTests(result('killed', 137, { stdout: `PASSED ${TEST_ID}\n` }))),
      TASK,
      PATCH,
    );
    expect(verdict).toMatchObject({
      outcome: 'reward',
      reward: 0,
      details: {
        resolved: false,
        FAIL_TO_PASS: { success: [], failure: [TEST_ID] },
        reason: 'the test run ended with status killed (exit 137) before pytest gave its result',
      },
    });
  });

  it.each([
    [1, `PASSED ${TEST_ID}\n`, 'pytest exited 1 (some tests failed) while its log reports no failure'],
    [
      2,
      `PASSED ${TEST_ID}\nFAILED tests/test_other.py::test_x\n`,
      'pytest exited 2: the run was interrupted',
    ],
    [5, `PASSED ${TEST_ID}\nERROR tests/test_other.py::test_x\n`, 'pytest exited 5: no tests were collected'],
  ])(
    "believes pytest's exit %i over a log that claims the tests passed",
    async (exitCode, stdout, reason) => {
      const verdict = await verifySwe(fakeClient(atTests(result('ok', exitCode, { stdout }))), TASK, PATCH);
      expect(verdict).toMatchObject({ outcome: 'reward', reward: 0, details: { resolved: false } });
      expect(String(verdict.details.reason)).toContain(reason);
    },
  );

  it('grades a pytest exit 1 whose failure is a test in neither list, as SWE-bench does', async () => {
    const stdout = `PASSED ${TEST_ID}\nFAILED tests/test_other.py::test_flaky - boom\n`;
    expect(await verifySwe(fakeClient(atTests(result('ok', 1, { stdout }))), TASK, PATCH)).toMatchObject({
      outcome: 'reward',
      reward: 1,
    });
  });

  it('keeps a lost sandbox and a provider error during the tests infra', async () => {
    expect((await verifySwe(fakeClient(atTests(result('sandbox_gone', null))), TASK, PATCH)).outcome).toBe(
      'infra_error',
    );
    const throwing = fakeClient((command) => {
      if (command === TASK.test_command) throw new GymError('PROVIDER_ERROR', 'engine said no');
      return null;
    });
    expect((await verifySwe(throwing, TASK, PATCH)).outcome).toBe('infra_error');
  });

  it('keeps a kill with no exit code infra, at the tests and at the test patch (the engine lost track)', async () => {
    const unknown = result('killed', null);
    expect((await verifySwe(fakeClient(atTests(unknown)), TASK, PATCH)).outcome).toBe('infra_error');
    const atTestPatch = fakeClient(atApply(TEST_APPLY, unknown));
    expect((await verifySwe(atTestPatch, TASK, PATCH)).outcome).toBe('infra_error');
  });
});

describe('SWE verifier: applying the patches', () => {
  it.each([
    ['timeout', result('timeout', null)],
    ['oom', result('oom', 137)],
  ])(
    'scores 0 a model patch whose apply ended with %s (the patch content did it)',
    async (status, answer) => {
      const verdict = await verifySwe(fakeClient(atApply(MODEL_APPLY, answer)), TASK, PATCH);
      expect(verdict).toMatchObject({ outcome: 'reward', reward: 0 });
      expect(String(verdict.details.reason)).toContain(status);
    },
  );

  it.each([
    ['killed', result('killed', 137)],
    ['sandbox_gone', result('sandbox_gone', null)],
  ])(
    'keeps a model patch apply that ended %s infra: nothing of the agent runs there to do it',
    async (_s, answer) => {
      const verdict = await verifySwe(fakeClient(atApply(MODEL_APPLY, answer)), TASK, PATCH);
      expect(verdict.outcome).toBe('infra_error');
    },
  );

  it.each([
    ['timeout', result('timeout', null)],
    ['killed', result('killed', 137)],
    ['oom', result('oom', 137)],
  ])('scores 0 a test patch apply that ended %s over the agent files', async (status, answer) => {
    const verdict = await verifySwe(fakeClient(atApply(TEST_APPLY, answer)), TASK, PATCH);
    expect(verdict).toMatchObject({ outcome: 'reward', reward: 0 });
    expect(String(verdict.details.reason)).toContain(status);
  });

  it('keeps a lost sandbox while applying the test patch infra', async () => {
    const verdict = await verifySwe(
      fakeClient(atApply(TEST_APPLY, result('sandbox_gone', null))),
      TASK,
      PATCH,
    );
    expect(verdict.outcome).toBe('infra_error');
  });
});

describe("extractPatch: the agent's changes", () => {
  function handle(
    answer: ExecResult | Error,
    stop?: SandboxHandle['stopProcesses'],
  ): SandboxHandle & {
    calls: string[];
  } {
    const calls: string[] = [];
    return {
      id: 'sbx-agent',
      calls,
      exec: async () => {
        calls.push('exec');
        if (answer instanceof Error) throw answer;
        return answer;
      },
      writeFile: async () => {},
      readFile: async () => Buffer.alloc(0),
      ...(stop === undefined
        ? {}
        : {
            stopProcesses: async () => {
              calls.push('stop');
              return stop();
            },
          }),
    };
  }

  it('stops the agent processes before it runs git, and returns the diff', async () => {
    const sandbox = handle(result('ok', 0, { stdout: PATCH }), async () => ({ killed: 2 }));
    expect(await extractPatch(sandbox, TASK)).toEqual({ patch: PATCH });
    expect(sandbox.calls).toEqual(['stop', 'exec']);
  });

  it('reads the diff without stopping when the provider cannot stop processes', async () => {
    const sandbox = handle(result('ok', 0, { stdout: PATCH }), async () => {
      throw new GymError('CAPABILITY_UNSUPPORTED', 'no');
    });
    expect(await extractPatch(sandbox, TASK)).toEqual({ patch: PATCH });
    const withoutStop = handle(result('ok', 0, { stdout: PATCH }));
    expect(await extractPatch(withoutStop, TASK)).toEqual({ patch: PATCH });
  });

  it('throws (infra) when stopping the processes fails in the provider', async () => {
    const sandbox = handle(result('ok', 0, { stdout: PATCH }), async () => {
      throw new GymError('PROVIDER_ERROR', 'cgroup unreachable');
    });
    await expect(extractPatch(sandbox, TASK)).rejects.toMatchObject({ code: 'PROVIDER_ERROR' });
    expect(sandbox.calls).toEqual(['stop']);
  });

  it.each([
    [
      'git fails (rm -rf .git, a replaced git)',
      result('ok', 128, { stderr: 'fatal: not a git repository' }),
      'exited with 128',
    ],
    ['the diff is over 64 MiB', result('ok', 0, { stdout: 'x', stdoutTruncated: true }), '64 MiB'],
    ['git diff times out (a huge repo)', result('timeout', null), 'timeout'],
    ['git diff is killed', result('killed', 137), 'killed'],
    ['git diff runs out of memory', result('oom', 137), 'oom'],
  ])('scores 0 with the reason when %s', async (_name, answer, why) => {
    const extracted = await extractPatch(
      handle(answer, async () => ({ killed: 0 })),
      TASK,
    );
    expect(extracted).toMatchObject({ verdict: { outcome: 'reward', reward: 0 } });
    const reason = String('verdict' in extracted ? extracted.verdict.details.reason : '');
    expect(reason).toMatch(/^the agent's changes could not be read: /);
    expect(reason).toContain(why);
  });

  it('is infra when the sandbox went away, git was killed with no exit code, or the daemon failed', async () => {
    expect(await extractPatch(handle(result('sandbox_gone', null)), TASK)).toMatchObject({
      verdict: { outcome: 'infra_error' },
    });
    expect(await extractPatch(handle(result('killed', null)), TASK)).toMatchObject({
      verdict: { outcome: 'infra_error' },
    });
    await expect(extractPatch(handle(new GymError('DAEMON_UNAVAILABLE', 'down')), TASK)).rejects.toThrow();
  });
});

describe('SWE verifier: the test files go back to the base commit before the test patch', () => {
  // The test patch changes a file that exists at the base commit (it adds a test to it).
  const EDITING: SweTask = {
    ...TASK,
    test_patch:
      'diff --git a/tests/test_basic.py b/tests/test_basic.py\nindex 1..2 100644\n--- a/tests/test_basic.py\n+++ b/tests/test_basic.py\n@@ -1 +1,2 @@\n x\n+y\n',
  };

  it('resets the changed files, then applies the test patch, then runs the tests', async () => {
    const commands: string[] = [];
    const client = fakeClient((command) => {
      commands.push(command);
      return null;
    });
    expect(await verifySwe(client, EDITING, PATCH)).toMatchObject({ outcome: 'reward', reward: 1 });
    expect(commands.slice(1)).toEqual([
      "git checkout abc123 -- 'tests/test_basic.py'",
      TEST_APPLY,
      TASK.test_command,
    ]);
  });

  it('scores 0 with the reason when the reset fails in the agent repo, infra when the sandbox went away', async () => {
    const failing = (answer: ExecResult) =>
      fakeClient((command) => (command.startsWith('git checkout') ? answer : null));
    const verdict = await verifySwe(failing(result('ok', 1, { stderr: 'hook said no' })), EDITING, PATCH);
    expect(verdict).toMatchObject({ outcome: 'reward', reward: 0 });
    expect(String(verdict.details.reason)).toContain('could not be reset');
    expect((await verifySwe(failing(result('sandbox_gone', null)), EDITING, PATCH)).outcome).toBe(
      'infra_error',
    );
  });
});

describe('SWE verifier: how the patches reach the grading sandbox', () => {
  /** A healthy daemon that records each upload and each exec request. */
  function recording() {
    const uploads: string[] = [];
    const requests: ExecRequestInput[] = [];
    const client = {
      createSandbox: async () => ({ id: 'sbx-verifier' }),
      destroySandbox: async () => {},
      writeFile: async (_id: string, path: string) => {
        uploads.push(path);
      },
      exec: async (_id: string, request: ExecRequestInput) => {
        requests.push(request);
        return result(
          'ok',
          0,
          request.command === TASK.test_command ? { stdout: `PASSED ${TEST_ID}\n` } : {},
        );
      },
    } as unknown as GymClient;
    return { client, uploads, requests };
  }

  it('hands small patches to their commands on stdin: no upload (two engine calls less per patch)', async () => {
    const { client, uploads, requests } = recording();
    expect(await verifySwe(client, TASK, PATCH)).toMatchObject({ outcome: 'reward', reward: 1 });
    expect(uploads).toEqual([]);
    expect(requests[0]).toMatchObject({ stdin: PATCH });
    expect(requests[0]!.command).toMatch(/^cat > \/tmp\/gym-model\.patch && \{ git apply --verbose /);
    expect(requests[1]).toMatchObject({ command: TEST_APPLY, stdin: TASK.test_patch });
    expect(requests[2]).toMatchObject({ command: TASK.test_command });
    expect(requests[2]!.stdin).toBeUndefined();
  });

  it('uploads a patch too large for an exec request, and applies it from that file', async () => {
    const { client, uploads, requests } = recording();
    const large = `${PATCH}${'+'.repeat(STDIN_PATCH_MAX_BYTES)}\n`;
    const task = { ...TASK, test_patch: large };
    expect(await verifySwe(client, task, large)).toMatchObject({ outcome: 'reward', reward: 1 });
    expect(uploads).toEqual(['/tmp/gym-model.patch', '/tmp/gym-test.patch']);
    expect(requests.map((request) => [request.command?.slice(0, 40), request.stdin])).toEqual([
      ['git apply --verbose /tmp/gym-model.patch', undefined],
      ['git apply --verbose /tmp/gym-test.patch', undefined],
      [TASK.test_command, undefined],
    ]);
  });
});
