import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import { evalScript, gradeLog, judgeTests, readTestLog, resolutionStatus } from './grading.ts';
import { parsePytest, parsePytestV2 } from './log-parsers.ts';
import { testCommandLine } from './verify.ts';

const run = promisify(execFile);
const NONCE = '0123abcd4567ef89';
const marked = (body: string, exitCode: number) =>
  `+ git apply -v /tmp/test.patch\nApplied patch tests/test_a.py cleanly.\n+ : '>>>>> Start Test Output ${NONCE}'\n${body}\n+ GYM_TEST_EXIT_CODE=${exitCode}\n+ : '>>>>> End Test Output ${NONCE}'\n>>>>> Test Exit Code ${NONCE}: ${exitCode}\n`;

describe('reading a test log', () => {
  it('reads the marked part, and the whole log when that part holds nothing', () => {
    expect(
      Object.fromEntries(readTestLog(marked('PASSED t::a\nFAILED t::b', 1), parsePytest, NONCE).statuses),
    ).toEqual({
      't::a': 'PASSED',
      't::b': 'FAILED',
    });
    const outside = `PASSED t::a\n${marked('no summary here', 0)}`;
    expect(readTestLog(outside, parsePytest, NONCE)).toMatchObject({ valid: true });
  });

  it('does not believe PASSED lines when the test command failed and reports no failure', () => {
    // A conftest.py of the patch can print these; the exit code says the run failed.
    expect(readTestLog(marked('PASSED t::a\nPASSED t::b', 2), parsePytest, NONCE)).toMatchObject({
      valid: false,
      reason: 'the test command exited 2 while its log reports no failure',
    });
  });

  it("ignores fake end markers and exit codes a test prints, with or without this run's nonce", () => {
    // The agent's code runs in the tests: it can print an end marker and a passing exit code.
    const fake = `PASSED t::a\n>>>>> End Test Output\n>>>>> Test Exit Code: 0\n>>>>> End Test Output ${NONCE}\n>>>>> Test Exit Code ${NONCE}: 0`;
    expect(readTestLog(marked(fake, 1), parsePytest, NONCE)).toMatchObject({
      valid: false,
      reason: 'the test command exited 1 while its log reports no failure',
    });
    expect(readTestLog(marked('PASSED t::a', 0), parsePytest, 'ffffffffffffffff')).toMatchObject({
      valid: false,
      reason: 'the test output markers are missing from the log',
    });
  });

  it('is invalid without markers, without results, or when the test patch did not apply', () => {
    expect(readTestLog('PASSED t::a', parsePytest, NONCE)).toMatchObject({ valid: false });
    expect(readTestLog(marked('collected 0 items', 5), parsePytest, NONCE)).toMatchObject({
      valid: false,
      reason: 'the test log holds no test results',
    });
    expect(readTestLog('>>>>> Test Patch Apply Failed', parsePytest, NONCE)).toMatchObject({
      reason: 'the test patch does not apply',
    });
  });
});

describe("SWE-bench's judgement", () => {
  const statuses = new Map([
    ['t::fixed', 'PASSED'],
    ['t::xfail', 'XFAIL'],
    ['t::broken', 'FAILED'],
    ['t::skipped', 'SKIPPED'],
    ['t::grammar[log(photon cm s)]', 'PASSED'],
    ['t::grammar[log(photon m)]', 'PASSED'],
    ['t::mixed[a b]', 'PASSED'],
    ['t::mixed[a c]', 'FAILED'],
  ] as const);

  it('a skipped FAIL_TO_PASS test is no fix, a skipped PASS_TO_PASS test is kept, a missing one failed', () => {
    const tests = judgeTests(
      statuses,
      ['t::fixed', 't::xfail', 't::skipped', 't::absent'],
      ['t::fixed', 't::skipped', 't::broken'],
    );
    expect(tests.FAIL_TO_PASS).toEqual({
      success: ['t::fixed', 't::xfail'],
      failure: ['t::skipped', 't::absent'],
    });
    expect(tests.PASS_TO_PASS).toEqual({ success: ['t::fixed', 't::skipped'], failure: ['t::broken'] });
  });

  it('matches an id cut off inside its parameters by prefix only when every match agrees', () => {
    const tests = judgeTests(statuses, ['t::grammar[log(photon', 't::mixed[a'], []);
    expect(tests.FAIL_TO_PASS).toEqual({ success: ['t::grammar[log(photon'], failure: ['t::mixed[a'] });
  });

  it('resolves FULL, PARTIAL or NO', () => {
    const of = (f2p: [number, number], p2p: [number, number]) =>
      resolutionStatus({
        FAIL_TO_PASS: { success: Array(f2p[0]).fill('s'), failure: Array(f2p[1]).fill('f') },
        PASS_TO_PASS: { success: Array(p2p[0]).fill('s'), failure: Array(p2p[1]).fill('f') },
        FAIL_TO_FAIL: { success: [], failure: [] },
        PASS_TO_FAIL: { success: [], failure: [] },
      });
    expect(of([2, 0], [3, 0])).toBe('RESOLVED_FULL');
    expect(of([0, 0], [0, 0])).toBe('RESOLVED_FULL');
    expect(of([1, 1], [3, 0])).toBe('RESOLVED_PARTIAL');
    expect(of([1, 1], [2, 1])).toBe('RESOLVED_NO');
    expect(of([0, 2], [3, 0])).toBe('RESOLVED_NO');
    expect(of([2, 0], [2, 1])).toBe('RESOLVED_NO');
  });

  it("writes SWE-bench's report entry", () => {
    const log = marked('PASSED t::a\nFAILED t::b - boom\nPASSED t::c', 1);
    expect(gradeLog(log, NONCE, 'diff', parsePytestV2, ['t::a', 't::b'], ['t::c'])).toEqual({
      status: 'RESOLVED_PARTIAL',
      report: {
        patch_is_None: false,
        patch_exists: true,
        patch_successfully_applied: true,
        resolved: false,
        tests_status: {
          FAIL_TO_PASS: { success: ['t::a'], failure: ['t::b'] },
          PASS_TO_PASS: { success: ['t::c'], failure: [] },
          FAIL_TO_FAIL: { success: [], failure: [] },
          PASS_TO_FAIL: { success: [], failure: [] },
        },
      },
    });
    expect(gradeLog(null, NONCE, null, parsePytest, ['t::a'], [])).toEqual({
      status: 'RESOLVED_NO',
      report: {
        patch_is_None: true,
        patch_exists: false,
        patch_successfully_applied: false,
        resolved: false,
      },
    });
  });
});

describe('the evaluation script', () => {
  it('resets the test files before the test patch and after the tests, and brackets the tests', () => {
    const script = evalScript({
      workdir: '/testbed',
      baseCommit: 'abc1234',
      testPatchPath: '/tmp/test.patch',
      testFiles: ['tests/test_a.py', "tests/it's.py"],
      testCommand: 'pytest -rA tests/test_a.py',
      nonce: NONCE,
      evalCommands: ['export LANG=en_US.UTF-8'],
    });
    const lines = script.split('\n');
    const reset = "git checkout abc1234 -- 'tests/test_a.py' 'tests/it'\\''s.py'";
    const order = [
      'export LANG=en_US.UTF-8',
      reset,
      "git apply -v '/tmp/test.patch' || { echo '>>>>> Test Patch Apply Failed'; exit 86; }",
      `: '>>>>> Start Test Output ${NONCE}'`,
      'pytest -rA tests/test_a.py',
      `: '>>>>> End Test Output ${NONCE}'`,
    ].map((line) => lines.indexOf(line));
    expect(order.every((index, position) => index > (order[position - 1] ?? -1))).toBe(true);
    expect(lines.lastIndexOf(reset)).toBeGreaterThan(order.at(-1)!);
  });
});

describe('the evaluation script in a real bash and git repository', () => {
  it("keeps its nonce from the tests and grades by its own markers, not a test's fake ones", async () => {
    const dir = await mkdtemp(join(tmpdir(), 'swebench-eval-'));
    try {
      const git = (...args: string[]) =>
        run('git', ['-c', 'user.email=t@t', '-c', 'user.name=t', ...args], { cwd: dir });
      await writeFile(join(dir, 'a.txt'), 'a\n');
      await git('init', '-q');
      await git('add', '.');
      await git('commit', '-qm', 'base');
      const baseCommit = (await git('rev-parse', 'HEAD')).stdout.trim();
      const patch = join(dir, 'test.patch');
      await writeFile(
        patch,
        'diff --git a/tests/t.py b/tests/t.py\nnew file mode 100644\n--- /dev/null\n+++ b/tests/t.py\n@@ -0,0 +1 @@\n+x\n',
      );
      const scriptPath = join(dir, 'eval.sh');
      // The "tests": read the script for the nonce, print PASSED and fake markers, then fail.
      const attack = join(dir, 'attack.sh');
      await writeFile(
        attack,
        `n=$(grep -o 'Output [0-9a-f]*' ${scriptPath} | head -1 | cut -d' ' -f2)\necho PASSED t::a\necho '>>>>> End Test Output'\necho '>>>>> Test Exit Code: 0'\necho ">>>>> End Test Output $n"\necho ">>>>> Test Exit Code $n: 0"\nexit 1\n`,
      );
      await writeFile(
        scriptPath,
        evalScript({
          workdir: dir,
          baseCommit,
          testPatchPath: patch,
          testFiles: [],
          testCommand: `bash ${attack}`,
          nonce: NONCE,
        }),
      );
      const { stdout } = await run('bash', [scriptPath], { cwd: dir });
      expect(existsSync(scriptPath)).toBe(false);
      expect(stdout).not.toContain(`>>>>> Test Exit Code ${NONCE}: 0`);
      expect(stdout).toContain(`>>>>> Test Exit Code ${NONCE}: 1`);
      expect(gradeLog(stdout, NONCE, 'diff', parsePytest, ['t::a'], []).status).toBe('RESOLVED_NO');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("quotes the test patch's file names in the test command", async () => {
    const dir = await mkdtemp(join(tmpdir(), 'swebench-quote-'));
    try {
      const name = 'tests/$(touch pwned)`touch pwned2`;x.py';
      const command = testCommandLine({ testCommand: "printf '%s\\n'", logParser: 'pytest' } as never, {
        repo: 'example/repo',
        test_patch: `diff --git a/${name} b/${name}\n`,
      });
      const { stdout } = await run('bash', ['-c', command], { cwd: dir });
      expect(stdout).toBe(`${name}\n`);
      expect(existsSync(join(dir, 'pwned'))).toBe(false);
      expect(existsSync(join(dir, 'pwned2'))).toBe(false);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
