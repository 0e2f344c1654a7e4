import { describe, expect, it } from 'vitest';
import { gradeTests, parsePytestLog } from './pytest-log.ts';

const LOG = `
============================= test session starts ==============================
collected 4 items

tests/test_a.py ..F.                                                     [100%]
=========================== short test summary info ============================
\u001b[32mPASSED\u001b[0m tests/test_a.py::test_one
PASSED tests/test_a.py::test_param[a b]
FAILED tests/test_a.py::test_three - AssertionError: assert 1 == 2
SKIPPED [1] tests/test_a.py:40: no network
SKIPPED tests/test_a.py::test_skipped
XFAIL tests/test_a.py::test_known - reason
ERROR tests/test_b.py::test_setup - fixture failed
========================= 1 failed, 2 passed in 0.12s ==========================
`;

describe('pytest -rA parsing and SWE-bench grading', () => {
  it('reads statuses from the short summary', () => {
    const statuses = parsePytestLog(LOG);
    expect(Object.fromEntries(statuses)).toEqual({
      'tests/test_a.py::test_one': 'PASSED',
      'tests/test_a.py::test_param[a b]': 'PASSED',
      'tests/test_a.py::test_three': 'FAILED',
      'tests/test_a.py::test_skipped': 'SKIPPED',
      'tests/test_a.py::test_known': 'XFAIL',
      'tests/test_b.py::test_setup': 'ERROR',
    });
  });

  it('resolves only when every FAIL_TO_PASS passes and every PASS_TO_PASS is maintained', () => {
    const statuses = parsePytestLog(LOG);
    const resolved = gradeTests(
      statuses,
      ['tests/test_a.py::test_one', 'tests/test_a.py::test_known'],
      ['tests/test_a.py::test_skipped'],
    );
    expect(resolved.resolved).toBe(true);
    const broken = gradeTests(
      statuses,
      ['tests/test_a.py::test_three', 'tests/test_a.py::missing'],
      ['tests/test_b.py::test_setup'],
    );
    expect(broken).toEqual({
      FAIL_TO_PASS: { success: [], failure: ['tests/test_a.py::test_three', 'tests/test_a.py::missing'] },
      PASS_TO_PASS: { success: [], failure: ['tests/test_b.py::test_setup'] },
      resolved: false,
    });
  });
});
