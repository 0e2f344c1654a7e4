/**
 * gradeSweBench's steps against a fake daemon: which exec each step is, what reaches the sandbox
 * (no script, no secret), and how each step's end is classified.
 */
import { describe, expect, it } from 'vitest';
import type { GymClient } from '../../../client/client.ts';
import type { ExecRequestInput, ExecResult } from '../../../core/schemas/exec.ts';
import { execResult as result } from '../../../test/fixtures/exec-result.ts';
import { SweBenchRowSchema } from './row.ts';
import { gradeSweBench } from './verify.ts';

const TEST_ID = 'tests/test_a.py::test_a';
const ROW = SweBenchRowSchema.parse({
  repo: 'example/repo',
  instance_id: 'example__repo-1',
  base_commit: 'abc1234',
  patch: '',
  test_patch:
    'diff --git a/tests/test_a.py b/tests/test_a.py\nindex 1..2 100644\n--- a/tests/test_a.py\n+++ b/tests/test_a.py\n@@ -1 +1,2 @@\n x\n+y\n',
  problem_statement: 'fix it',
  version: '1.0',
  FAIL_TO_PASS: JSON.stringify([TEST_ID]),
  PASS_TO_PASS: '[]',
});
const SPEC = { testCommand: 'pytest -rA', logParser: 'pytest' } as const;
const PATCH = 'diff --git a/a.py b/a.py\n';

type Step = 'model' | 'prepare' | 'tests';
const stepOf = (request: ExecRequestInput): Step =>
  request.command?.includes('/tmp/gym-model.patch')
    ? 'model'
    : request.argv?.[2]?.includes('git apply -v')
      ? 'prepare'
      : 'tests';

function fakeDaemon(answers: Partial<Record<Step, ExecResult>>) {
  const requests: ExecRequestInput[] = [];
  const uploads: string[] = [];
  const client = {
    createSandbox: async () => ({ id: 'sbx-verifier' }),
    destroySandbox: async () => {},
    writeFile: async (_id: string, path: string) => {
      uploads.push(path);
    },
    exec: async (_id: string, request: ExecRequestInput) => {
      requests.push(request);
      const step = stepOf(request);
      return answers[step] ?? result('ok', 0, step === 'tests' ? { stdout: `PASSED ${TEST_ID}\n` } : {});
    },
  } as unknown as GymClient;
  const grade = () =>
    gradeSweBench(client, { row: ROW, image: 'img:1', spec: SPEC, testTimeoutSec: 60 }, PATCH);
  return { grade, requests, uploads };
}

describe('SWE-bench grading, step by step', () => {
  it('runs the model patch, the test patch and the tests as three execs, with no script left in the sandbox', async () => {
    const daemon = fakeDaemon({});
    expect(await daemon.grade()).toMatchObject({ outcome: 'reward', reward: 1 });
    expect(daemon.requests.map(stepOf)).toEqual(['model', 'prepare', 'tests']);
    expect(daemon.uploads).toEqual([]);
    const [, prepare, tests] = daemon.requests;
    expect(prepare).toMatchObject({ argv: ['bash', '-c', expect.any(String)], stdin: ROW.test_patch });
    expect(prepare!.argv![2]).toContain("git checkout abc1234 -- 'tests/test_a.py'");
    expect(tests!.argv![2]!.split('\n').at(-1)).toBe('pytest -rA tests/test_a.py');
    expect(tests!.stdin).toBeUndefined();
  });

  it('scores 0 a test patch that does not apply over the agent changes, with a report that graded nothing', async () => {
    const verdict = await fakeDaemon({ prepare: result('ok', 1, { stderr: 'error: patch failed' }) }).grade();
    expect(verdict).toMatchObject({
      outcome: 'reward',
      reward: 0,
      details: {
        reason: 'the test patch does not apply',
        report: { [ROW.instance_id]: { patch_successfully_applied: false, resolved: false } },
      },
    });
  });

  it('keeps a lost sandbox infra, at the test patch and at the tests', async () => {
    expect((await fakeDaemon({ prepare: result('sandbox_gone', null) }).grade()).outcome).toBe('infra_error');
    expect((await fakeDaemon({ tests: result('sandbox_gone', null) }).grade()).outcome).toBe('infra_error');
    expect((await fakeDaemon({ tests: result('killed', null) }).grade()).outcome).toBe('infra_error');
  });

  it("believes the test exec's own exit status over the PASSED lines of its log", async () => {
    const forged = `PASSED ${TEST_ID}\nFAILED tests/test_a.py::test_other\n>>>>> Test Exit Code x: 0\n`;
    const verdict = await fakeDaemon({ tests: result('ok', 3, { stdout: forged }) }).grade();
    expect(verdict).toMatchObject({
      outcome: 'reward',
      reward: 0,
      details: { resolution: 'RESOLVED_NO', reason: 'pytest exited 3: an internal error', testExitCode: 3 },
    });
  });

  it('reads only stdout as the test log: what set up the environment is on stderr', async () => {
    const tests = result('ok', 0, { stdout: 'collected 0 items\n', stderr: `PASSED ${TEST_ID}\n` });
    expect(await fakeDaemon({ tests }).grade()).toMatchObject({
      reward: 0,
      details: { reason: 'the test log holds no test results' },
    });
  });
});
