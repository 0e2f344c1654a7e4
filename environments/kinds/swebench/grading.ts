/**
 * Grading as SWE-bench grades: the test files reset to the base commit and the test patch applied,
 * then the repository's test command run, its log read by the repository's parser, FAIL_TO_PASS /
 * PASS_TO_PASS judged into RESOLVED_FULL / RESOLVED_PARTIAL / RESOLVED_NO, and SWE-bench's
 * per-instance `report.json`.
 *
 * The judgement follows SWE-bench 5.x: a FAIL_TO_PASS test must pass (PASSED or XFAIL; a skip is
 * no fix); a PASS_TO_PASS test must pass or be skipped; a test missing from the log failed; an
 * expected id cut off inside its parameters matches by prefix when every match agrees.
 *
 * Where SWE-bench runs one script and finds the test output and exit code by marker lines in its
 * log, the two steps here are execs of their own (see verify.ts): the code under test is the
 * agent's, runs with the script's uid, and can read a script (its marker nonce included) through
 * /proc, rewrite the rest of it, kill it, and print any marker. So the test run's log is exactly
 * that exec's output, its exit status the exec's own, and no secret is in the sandbox; the exit
 * status is held against the runner's meaning of it (verifiers/runner-exit.ts), so a log that
 * claims passes the runner's status denies is not believed.
 */
import type { TestLogParser, TestStatus } from '../../verifiers/pytest-log.ts';
import { distrustedRun, type TestRunEnd, type TestRunner } from '../../verifiers/runner-exit.ts';

export type ResolvedStatus = 'RESOLVED_FULL' | 'RESOLVED_PARTIAL' | 'RESOLVED_NO';

const quote = (value: string) => `'${value.replaceAll("'", `'\\''`)}'`;

/** SWE-bench's images keep the repository's environment in conda; ours have none. */
const ACTIVATE_CONDA =
  'if [ -f /opt/miniconda3/bin/activate ]; then source /opt/miniconda3/bin/activate && conda activate testbed; fi';

export interface PreparationInput {
  baseCommit: string;
  /** Files the test patch changes that exist at the base commit: reset before it is applied. */
  testFiles: string[];
  /** Where the test patch was uploaded in the sandbox; absent: it comes on standard input. */
  testPatchPath?: string;
}

/**
 * The bash script (run with `bash -c` in the repository) that puts the test files back and applies
 * the test patch: its exit status is `git apply`'s. A reset that fails is not fatal, as in
 * SWE-bench's script (the apply that follows says whether the tests went in).
 */
export function preparationScript(input: PreparationInput): string {
  return [
    'set -uxo pipefail',
    // The agent may have changed the test files: SWE-bench puts them back before its tests go in.
    input.testFiles.length === 0
      ? ': no test file to reset'
      : `git checkout ${input.baseCommit} -- ${input.testFiles.map(quote).join(' ')}`,
    `git apply -v ${input.testPatchPath === undefined ? '-' : quote(input.testPatchPath)}`,
  ].join('\n');
}

export interface TestScriptInput {
  workdir: string;
  /** The complete test command (directives appended already, quoted). */
  testCommand: string;
  /** Run before the tests (exported variables stay set for them). */
  evalCommands?: string[];
}

/**
 * The bash script (run with `bash -c`) that runs the tests. What sets up their environment writes
 * to stderr; from the test command on, everything goes to stdout in order (its stderr included,
 * as SWE-bench's merged log has it), so stdout is the test log, and the script's exit status is
 * the test command's: nothing runs after it.
 */
export function testScript(input: TestScriptInput): string {
  return [
    'set -uxo pipefail',
    '{',
    ACTIVATE_CONDA,
    `cd ${quote(input.workdir)}`,
    ...(input.evalCommands ?? []),
    '} >&2',
    'exec 2>&1',
    input.testCommand,
  ].join('\n');
}

/** The test run as the daemon saw it: its log (the exec's stdout), how it ended, and its runner. */
export interface TestRun extends TestRunEnd {
  log: string;
  /** Undefined: a runner whose exit statuses are not known here. */
  runner?: TestRunner;
}

export interface StatusMapResult {
  statuses: Map<string, TestStatus>;
  /** False when the log cannot be graded (no results, or results the run's end contradicts). */
  valid: boolean;
  reason?: string;
}

/** The status map of a test run's log, and whether the run's own end lets it be believed. */
export function readTestLog(run: TestRun, parser: TestLogParser): StatusMapResult {
  const statuses = parser(run.log);
  const distrust = distrustedRun(run.runner, run, statuses);
  if (distrust !== null) return { statuses, valid: false, reason: distrust };
  if (statuses.size === 0) return { statuses, valid: false, reason: 'the test log holds no test results' };
  return { statuses, valid: true };
}

export interface TestsStatus {
  FAIL_TO_PASS: { success: string[]; failure: string[] };
  PASS_TO_PASS: { success: string[]; failure: string[] };
  FAIL_TO_FAIL: { success: string[]; failure: string[] };
  PASS_TO_FAIL: { success: string[]; failure: string[] };
}

/** The status of an expected id; an id cut off inside `[...]` matches by prefix when all matches agree. */
function lookup(id: string, statuses: ReadonlyMap<string, TestStatus>): TestStatus | undefined {
  const exact = statuses.get(id);
  if (exact !== undefined) return exact;
  if (id.split('[').length <= id.split(']').length) return undefined;
  const matches = [...statuses.entries()].filter(([key]) => key.startsWith(id));
  const passes = new Set(matches.map(([, status]) => status === 'PASSED' || status === 'XFAIL'));
  return matches.length > 0 && passes.size === 1 ? matches[0]![1] : undefined;
}

export function judgeTests(
  statuses: ReadonlyMap<string, TestStatus>,
  failToPass: readonly string[],
  passToPass: readonly string[],
): TestsStatus {
  const passed = (id: string) => {
    const status = lookup(id, statuses);
    return status === 'PASSED' || status === 'XFAIL';
  };
  const maintained = (id: string) => passed(id) || lookup(id, statuses) === 'SKIPPED';
  const split = (ids: readonly string[], judge: (id: string) => boolean) => ({
    success: ids.filter(judge),
    failure: ids.filter((id) => !judge(id)),
  });
  return {
    FAIL_TO_PASS: split(failToPass, passed),
    PASS_TO_PASS: split(passToPass, maintained),
    FAIL_TO_FAIL: { success: [], failure: [] },
    PASS_TO_FAIL: { success: [], failure: [] },
  };
}

const ratio = ({ success, failure }: { success: string[]; failure: string[] }) =>
  success.length + failure.length === 0 ? 1 : success.length / (success.length + failure.length);

/** FULL: every FAIL_TO_PASS and PASS_TO_PASS test succeeds; PARTIAL: some FAIL_TO_PASS and every PASS_TO_PASS. */
export function resolutionStatus(tests: TestsStatus): ResolvedStatus {
  const fixed = ratio(tests.FAIL_TO_PASS);
  const kept = ratio(tests.PASS_TO_PASS);
  if (fixed === 1 && kept === 1) return 'RESOLVED_FULL';
  if (fixed > 0 && fixed < 1 && kept === 1) return 'RESOLVED_PARTIAL';
  return 'RESOLVED_NO';
}

/** One instance's entry of SWE-bench's report.json (`{ [instance_id]: InstanceReport }`). */
export interface InstanceReport {
  patch_is_None: boolean;
  patch_exists: boolean;
  /** SWE-bench's name: true when a gradable status map came out of the log. */
  patch_successfully_applied: boolean;
  resolved: boolean;
  tests_status?: TestsStatus;
}

export interface Grade {
  status: ResolvedStatus;
  report: InstanceReport;
  /** Why the log could not be graded, when it could not. */
  reason?: string;
}

/** Grades one test run (`run` or `modelPatch` null: there was no prediction, or no run). */
export function gradeLog(
  run: TestRun | null,
  modelPatch: string | null,
  parser: TestLogParser,
  failToPass: readonly string[],
  passToPass: readonly string[],
): Grade {
  const report: InstanceReport = {
    patch_is_None: modelPatch === null,
    patch_exists: modelPatch !== null,
    patch_successfully_applied: false,
    resolved: false,
  };
  if (modelPatch === null || run === null) return { status: 'RESOLVED_NO', report };
  const read = readTestLog(run, parser);
  if (!read.valid) return { status: 'RESOLVED_NO', report, reason: read.reason! };
  const tests = judgeTests(read.statuses, failToPass, passToPass);
  const status = resolutionStatus(tests);
  return {
    status,
    report: {
      ...report,
      patch_successfully_applied: true,
      resolved: status === 'RESOLVED_FULL',
      tests_status: tests,
    },
  };
}
