import { execFile, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { describe, expect, it } from 'vitest';
import {
  gradeLog,
  judgeTests,
  preparationScript,
  readTestLog,
  resolutionStatus,
  type TestRun,
  testScript,
} from './grading.ts';
import { parseDjango, parsePytest, parsePytestV2 } from './log-parsers.ts';
import { testCommandLine } from './verify.ts';

const run = promisify(execFile);
const pytestRun = (log: string, exitCode: number, status: TestRun['status'] = 'ok'): TestRun => ({
  log: `+ pytest -rA tests/test_a.py\n${log}\n`,
  status,
  exitCode,
  runner: 'pytest',
});

describe('reading a test run', () => {
  it('reads the whole log of the test exec', () => {
    expect(
      Object.fromEntries(readTestLog(pytestRun('PASSED t::a\nFAILED t::b', 1), parsePytest).statuses),
    ).toEqual({ 't::a': 'PASSED', 't::b': 'FAILED' });
    expect(readTestLog(pytestRun('PASSED t::a', 0), parsePytest)).toMatchObject({ valid: true });
  });

  it('believes a pytest exit 1 only with a failure in the log (it may be a test in neither list)', () => {
    expect(readTestLog(pytestRun('PASSED t::a\nFAILED t::other', 1), parsePytest)).toMatchObject({
      valid: true,
    });
    // The code under test can print these and exit 1; pytest exits 1 only when a test failed.
    expect(readTestLog(pytestRun('PASSED t::a\nPASSED t::b', 1), parsePytest)).toMatchObject({
      valid: false,
      reason: 'pytest exited 1 (some tests failed) while its log reports no failure',
    });
  });

  it.each([
    [2, 'interrupted'],
    [3, 'internal error'],
    [4, 'usage error'],
    [5, 'no tests were collected'],
    [7, 'does not define'],
  ])('never grades a pytest exit %i as a pass, whatever the log claims (%s)', (exitCode, meaning) => {
    const read = readTestLog(pytestRun('PASSED t::a\nFAILED t::forged', exitCode), parsePytest);
    expect(read.valid).toBe(false);
    expect(read.reason).toMatch(new RegExp(`^pytest exited ${exitCode}: .*${meaning}`));
  });

  it('does not believe a run that was killed, ran out of memory, or died of a signal', () => {
    const passing = 'PASSED t::a\nFAILED t::other';
    expect(readTestLog(pytestRun(passing, 137, 'killed'), parsePytest).reason).toBe(
      'the test run ended with status killed (exit 137) before pytest gave its result',
    );
    expect(readTestLog(pytestRun(passing, 137, 'oom'), parsePytest).reason).toMatch(/ran out of memory/);
    expect(readTestLog(pytestRun(passing, 139), parsePytest).reason).toBe(
      'pytest exited 139: it was killed by signal 11 before it gave its result',
    );
  });

  it("holds Django's and sympy's runners to 0 passed, 1 not, and any other command to the convention", () => {
    const django = (log: string, exitCode: number): TestRun => ({
      log,
      status: 'ok',
      exitCode,
      runner: 'django',
    });
    expect(readTestLog(django('test_a (m.T) ... ok\ntest_b (m.T) ... FAIL', 1), parseDjango).valid).toBe(
      true,
    );
    expect(readTestLog(django('test_a (m.T) ... ok', 1), parseDjango).reason).toBe(
      "Django's runtests.py exited 1 while its log reports no failure",
    );
    expect(readTestLog(django('test_a (m.T) ... ok\ntest_b (m.T) ... FAIL', 2), parseDjango).reason).toMatch(
      /^Django's runtests\.py exited 2, which it does only when the run did not pass/,
    );
    const other = (exitCode: number, log: string): TestRun => ({ log, status: 'ok', exitCode });
    expect(readTestLog(other(3, 'PASSED t::a\nFAILED t::b'), parsePytest).valid).toBe(true);
    expect(readTestLog(other(3, 'PASSED t::a'), parsePytest).reason).toBe(
      'the test command exited 3 while its log reports no failure',
    );
  });

  it('is invalid without results', () => {
    expect(readTestLog(pytestRun('collected 0 items', 0), parsePytest)).toMatchObject({
      valid: false,
      reason: 'the test log holds no test results',
    });
    expect(readTestLog(pytestRun('collected 0 items', 5), parsePytest).reason).toMatch(
      /no tests were collected/,
    );
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
    const log = pytestRun('PASSED t::a\nFAILED t::b - boom\nPASSED t::c', 1);
    expect(gradeLog(log, 'diff', parsePytestV2, ['t::a', 't::b'], ['t::c'])).toEqual({
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
    expect(gradeLog(null, null, parsePytest, ['t::a'], [])).toEqual({
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

describe('the preparation and test scripts in a real bash and git repository', () => {
  it('resets the test files, applies the test patch from stdin, and exits as git apply does', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'swebench-prepare-'));
    try {
      const git = (...args: string[]) =>
        run('git', ['-c', 'user.email=t@t', '-c', 'user.name=t', ...args], { cwd: dir });
      await mkdir(join(dir, 'tests'));
      await writeFile(join(dir, "tests/it's.py"), 'x\n');
      await git('init', '-q');
      await git('add', '.');
      await git('commit', '-qm', 'base');
      const baseCommit = (await git('rev-parse', 'HEAD')).stdout.trim();
      // The agent edited the test file; the test patch changes the base version of it.
      await writeFile(join(dir, "tests/it's.py"), 'the agent wrote this\n');
      const patch =
        "diff --git a/tests/it's.py b/tests/it's.py\n--- a/tests/it's.py\n+++ b/tests/it's.py\n@@ -1 +1,2 @@\n x\n+y\n";
      const script = preparationScript({ baseCommit, testFiles: ["tests/it's.py"] });
      const bash = (stdin: string) =>
        new Promise<number | null>((resolve) => {
          const child = spawn('bash', ['-c', script], { cwd: dir, stdio: ['pipe', 'ignore', 'ignore'] });
          child.on('close', resolve);
          child.stdin.end(stdin);
        });
      expect(await bash(patch)).toBe(0);
      expect(await readFile(join(dir, "tests/it's.py"), 'utf8')).toBe('x\ny\n');
      expect(await bash('not a patch\n')).not.toBe(0);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('sends only the test command to stdout, both its streams, and exits with its status', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'swebench-tests-'));
    try {
      const script = testScript({
        workdir: dir,
        testCommand: "printf 'PASSED t::a\\n'; printf 'FAILED t::b\\n' >&2; exit 3",
        evalCommands: ['export GYM_TEST_LANG=en_US.UTF-8', 'echo set up'],
      });
      const ended = await run('bash', ['-c', `${script}`], { cwd: tmpdir() }).then(
        () => ({ code: 0, stdout: '', stderr: '' }),
        (error: { code: number; stdout: string; stderr: string }) => error,
      );
      expect(ended.code).toBe(3);
      expect(ended.stdout.split('\n').filter((line) => !line.startsWith('+'))).toEqual([
        'PASSED t::a',
        'FAILED t::b',
        '',
      ]);
      expect(ended.stderr).toContain('set up');
      const environment = testScript({
        workdir: dir,
        testCommand: 'echo "$GYM_TEST_LANG $PWD"',
        evalCommands: ['export GYM_TEST_LANG=C.UTF-8'],
      });
      expect((await run('bash', ['-c', environment])).stdout).toContain(`C.UTF-8 ${dir}`);
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
