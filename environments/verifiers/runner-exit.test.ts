import { describe, expect, it } from 'vitest';
import { distrustedRun, testRunnerOf } from './runner-exit.ts';

describe('which runner a test command runs', () => {
  it.each([
    'pytest -rA',
    'pytest --no-header -rA tests/test_a.py',
    'py.test -rA',
    '/usr/bin/pytest-3 -rA',
    'python3 -m pytest -rA -p no:cacheprovider tests',
    'python -B -m pytest tests',
    'python3.11 -mpytest tests',
    "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' pytest -rA 'tests/it''s.py'",
    'env LANG=C.UTF-8 python3 -m pytest -rA 2>&1',
  ])('knows pytest in %s', (command) => {
    expect(testRunnerOf(command)).toBe('pytest');
  });

  it.each([
    // More than one command: the last one's status is the shell's, and it may not be pytest's.
    'pytest -rA; true',
    'pytest -rA || true',
    'cd tests && pytest',
    'pytest -rA | tee log',
    'pytest & wait',
    '(pytest)',
    'echo `pytest`',
    'pytest -rA\necho done',
    // Not pytest, or pytest run through something that has its own exit statuses.
    'tox --current-env -epy39 -v --',
    './tests/runtests.py --verbosity 2',
    'python3 -m unittest',
    'python3 -c "import pytest; pytest.main()"',
    'python3 run_pytest.py',
    "pytest 'unclosed",
    '',
  ])('assumes no runner for %j', (command) => {
    expect(testRunnerOf(command)).toBeUndefined();
  });
});

describe("a run's end held against its log", () => {
  const failing = new Map([['t::a', 'FAILED' as const]]);
  const passing = new Map([['t::a', 'PASSED' as const]]);

  it('believes an exit 0 whatever the runner, and a failure explaining an exit 1', () => {
    for (const runner of ['pytest', 'django', 'sympy', undefined] as const) {
      expect(distrustedRun(runner, { status: 'ok', exitCode: 0 }, passing)).toBeNull();
      expect(distrustedRun(runner, { status: 'ok', exitCode: 1 }, failing)).toBeNull();
      expect(distrustedRun(runner, { status: 'ok', exitCode: 1 }, passing)).toMatch(/reports no failure/);
    }
  });

  it("says sympy's bin/test exits 0 or 1 only", () => {
    expect(distrustedRun('sympy', { status: 'ok', exitCode: 2 }, failing)).toBe(
      "sympy's bin/test exited 2, which it does only when the run did not pass (0 all passed, 1 not)",
    );
  });

  it('never believes a run killed by a signal, for a runner it does not know either', () => {
    expect(distrustedRun(undefined, { status: 'ok', exitCode: 137 }, failing)).toBe(
      'the test command exited 137: it was killed by signal 9 before it gave its result',
    );
    expect(distrustedRun(undefined, { status: 'killed', exitCode: 143 }, failing)).toMatch(/status killed/);
  });
});
