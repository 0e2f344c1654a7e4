/**
 * Reads pytest's `-rA` short test summary into test id -> status, the way SWE-bench's pytest
 * parser does: a line that starts with a status word; the id is what follows it (a failure's
 * message after " - " dropped). ANSI colour codes are stripped first. The parser is one
 * function of the `TestLogParser` shape, so other test runners can plug in their own.
 */
export type TestStatus = 'PASSED' | 'FAILED' | 'SKIPPED' | 'ERROR' | 'XFAIL';

export type TestLogParser = (log: string) => Map<string, TestStatus>;

const STATUSES: readonly TestStatus[] = ['PASSED', 'FAILED', 'SKIPPED', 'ERROR', 'XFAIL'];
// biome-ignore lint/suspicious/noControlCharactersInRegex: stripping terminal escape sequences is the point.
const ANSI = /\u001b\[[0-9;]*m/g;

export const parsePytestLog: TestLogParser = (log) => {
  const results = new Map<string, TestStatus>();
  for (const raw of log.split('\n')) {
    const line = raw.replace(ANSI, '').trim();
    const status = STATUSES.find((candidate) => line.startsWith(`${candidate} `));
    if (status === undefined) continue;
    let rest = line.slice(status.length + 1);
    // "SKIPPED [1] path:line: reason" is a summary of skips, not a test id.
    if (status === 'SKIPPED' && rest.startsWith('[')) continue;
    const messageAt = rest.indexOf(' - ');
    if (messageAt !== -1) rest = rest.slice(0, messageAt);
    const id = rest.trim();
    if (id !== '') results.set(id, status);
  }
  return results;
};

export interface SweGrade {
  FAIL_TO_PASS: { success: string[]; failure: string[] };
  PASS_TO_PASS: { success: string[]; failure: string[] };
  resolved: boolean;
}

/**
 * SWE-bench's judgement: a FAIL_TO_PASS test must now pass (PASSED or XFAIL); a PASS_TO_PASS
 * test must still pass (a SKIPPED one counts as maintained). A test absent from the log failed.
 * Resolved only when every listed test succeeds.
 */
export function gradeTests(
  statuses: Map<string, TestStatus>,
  failToPass: string[],
  passToPass: string[],
): SweGrade {
  const isPassed = (id: string) => statuses.get(id) === 'PASSED' || statuses.get(id) === 'XFAIL';
  const isMaintained = (id: string) => isPassed(id) || statuses.get(id) === 'SKIPPED';
  const split = (ids: string[], judge: (id: string) => boolean) => ({
    success: ids.filter(judge),
    failure: ids.filter((id) => !judge(id)),
  });
  const f2p = split(failToPass, isPassed);
  const p2p = split(passToPass, isMaintained);
  return {
    FAIL_TO_PASS: f2p,
    PASS_TO_PASS: p2p,
    resolved: f2p.failure.length === 0 && p2p.failure.length === 0,
  };
}
