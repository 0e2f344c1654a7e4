/**
 * Grading as SWE-bench grades: the evaluation script (test files reset to the base commit, the
 * test patch applied, the test command between start and end markers, its exit code recorded),
 * the status map read from the marked part of the log, FAIL_TO_PASS / PASS_TO_PASS judged into
 * RESOLVED_FULL / RESOLVED_PARTIAL / RESOLVED_NO, and SWE-bench's per-instance `report.json`.
 *
 * The judgement follows SWE-bench 5.x: a FAIL_TO_PASS test must pass (PASSED or XFAIL; a skip is
 * no fix); a PASS_TO_PASS test must pass or be skipped; a test missing from the log failed; an
 * expected id cut off inside its parameters matches by prefix when every match agrees; and a log
 * whose test command exited non-zero while it reports no failure is not believed (a patch can
 * print its own PASSED lines).
 *
 * The code under test is the agent's, so it can print marker lines too: each run's markers carry
 * a random nonce (the script deletes itself before the tests run, so they cannot read it there),
 * and the end marker and exit code are the last ones with that nonce, printed after the tests.
 */
import type { TestLogParser, TestStatus } from '../../verifiers/pytest-log.ts';

export const START_TEST_OUTPUT = '>>>>> Start Test Output';
export const END_TEST_OUTPUT = '>>>>> End Test Output';
export const TEST_EXIT_CODE = '>>>>> Test Exit Code';
/** Printed by our script when the test patch does not apply even after the reset. */
export const TEST_PATCH_FAILED = '>>>>> Test Patch Apply Failed';
/** The script's exit code for that case (the tests did not run). */
export const TEST_PATCH_FAILED_EXIT = 86;

export type ResolvedStatus = 'RESOLVED_FULL' | 'RESOLVED_PARTIAL' | 'RESOLVED_NO';

const quote = (value: string) => `'${value.replaceAll("'", `'\\''`)}'`;

export interface EvalScriptInput {
  workdir: string;
  baseCommit: string;
  /** Where the test patch was written in the sandbox. */
  testPatchPath: string;
  /** Files the test patch changes that exist at the base commit: reset before and after. */
  testFiles: string[];
  /** The complete test command (directives appended already, quoted). */
  testCommand: string;
  /** This run's marker nonce (random, letters and digits): fake markers without it are ignored. */
  nonce: string;
  evalCommands?: string[];
}

/**
 * The bash script run in the grading sandbox once the model patch is applied. Everything goes to
 * stdout in order (`set -x` traces included), as SWE-bench's merged log does, so the markers
 * bracket the test output.
 */
export function evalScript(input: EvalScriptInput): string {
  const reset =
    input.testFiles.length === 0
      ? ': no test file to reset'
      : `git checkout ${input.baseCommit} -- ${input.testFiles.map(quote).join(' ')}`;
  checkNonce(input.nonce);
  return [
    '#!/bin/bash',
    // The nonce is in this file: the agent's tests must not read it from here.
    'rm -f -- "$0"',
    'exec 2>&1',
    'set -uxo pipefail',
    // SWE-bench's images keep the repository's environment in conda; ours have none.
    'if [ -f /opt/miniconda3/bin/activate ]; then source /opt/miniconda3/bin/activate && conda activate testbed; fi',
    `cd ${quote(input.workdir)}`,
    ...(input.evalCommands ?? []),
    // The agent may have changed the test files: SWE-bench puts them back before its tests go in.
    reset,
    `git apply -v ${quote(input.testPatchPath)} || { echo '${TEST_PATCH_FAILED}'; exit ${TEST_PATCH_FAILED_EXIT}; }`,
    `: '${START_TEST_OUTPUT} ${input.nonce}'`,
    input.testCommand,
    'GYM_TEST_EXIT_CODE=$?',
    `: '${END_TEST_OUTPUT} ${input.nonce}'`,
    `echo "${TEST_EXIT_CODE} ${input.nonce}: $GYM_TEST_EXIT_CODE"`,
    reset,
    '',
  ].join('\n');
}

const checkNonce = (nonce: string) => {
  if (!/^[A-Za-z0-9]{8,}$/.test(nonce))
    throw new Error('the marker nonce must be 8 or more letters or digits');
};

export interface StatusMapResult {
  statuses: Map<string, TestStatus>;
  /** False when the log cannot be graded (no markers, no results, results that contradict the exit code). */
  valid: boolean;
  reason?: string;
}

/**
 * The status map of a test log: the marked part first, the whole log when that yields nothing.
 * Only markers with this run's nonce count, and the last end marker and exit code (a test that
 * prints fake ones does so before the script's own).
 */
export function readTestLog(log: string, parser: TestLogParser, nonce: string): StatusMapResult {
  checkNonce(nonce);
  const empty = new Map<string, TestStatus>();
  if (log.includes(TEST_PATCH_FAILED))
    return { statuses: empty, valid: false, reason: 'the test patch does not apply' };
  const startMarker = `${START_TEST_OUTPUT} ${nonce}`;
  const start = log.indexOf(startMarker);
  const end = log.lastIndexOf(`${END_TEST_OUTPUT} ${nonce}`);
  if (start === -1 || end <= start)
    return { statuses: empty, valid: false, reason: 'the test output markers are missing from the log' };
  let statuses = parser(log.slice(start + startMarker.length, end));
  if (statuses.size === 0) statuses = parser(log);
  if (statuses.size === 0) return { statuses, valid: false, reason: 'the test log holds no test results' };
  const exitLine = new RegExp(`^${TEST_EXIT_CODE} ${nonce}: (-?\\d+)$`, 'gm');
  const exitCode = [...log.slice(end).matchAll(exitLine)].at(-1)?.[1];
  const reportsFailure = [...statuses.values()].some((status) => status === 'FAILED' || status === 'ERROR');
  if (exitCode !== undefined && Number(exitCode) !== 0 && !reportsFailure)
    return {
      statuses,
      valid: false,
      reason: `the test command exited ${exitCode} while its log reports no failure`,
    };
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

/** Grades one test log (`modelPatch` null: there was no prediction) written with markers of `nonce`. */
export function gradeLog(
  log: string | null,
  nonce: string,
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
  if (modelPatch === null || log === null) return { status: 'RESOLVED_NO', report };
  const read = readTestLog(log, parser, nonce);
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
