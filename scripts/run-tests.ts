/**
 * Runs the vitest suite and ends with one plain line, `N passed, N failed, N skipped`, that any
 * CI can read. With GYM_REQUIRE_DOCKER=1 a skipped test is a failure: in CI every test must run.
 * Extra arguments go to vitest (for example a file filter).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';

interface VitestReport {
  numPassedTests: number;
  numFailedTests: number;
  numPendingTests: number;
  numTodoTests: number;
  numTotalTests: number;
  testResults: Array<{
    name: string;
    startTime: number;
    endTime: number;
    assertionResults: Array<{ fullName: string; status: string }>;
  }>;
}

/** Files slower than this go into test/durations.json (the order files start in: test/sequencer.ts). */
const RECORDED_FILE_SECONDS = 5;

const directory = mkdtempSync(join(tmpdir(), 'gym-vitest-'));
const reportPath = join(directory, 'report.json');
const vitest = spawnSync(
  'npx',
  [
    'vitest',
    'run',
    '--reporter=default',
    '--reporter=json',
    `--outputFile.json=${reportPath}`,
    ...process.argv.slice(2),
  ],
  { stdio: 'inherit' },
);
let report: VitestReport;
try {
  report = JSON.parse(readFileSync(reportPath, 'utf8')) as VitestReport;
} catch {
  console.log('0 passed, 1 failed');
  console.error(`vitest wrote no report (exit ${vitest.status})`);
  process.exit(1);
} finally {
  rmSync(directory, { recursive: true, force: true });
}
const fileSeconds = report.testResults
  .map((file) => ({
    file: relative(process.cwd(), file.name),
    seconds: Math.round((file.endTime - file.startTime) / 1000),
  }))
  .sort((left, right) => right.seconds - left.seconds);
console.log(
  `slowest files: ${fileSeconds
    .slice(0, 12)
    .map(({ file, seconds }) => `${file} ${seconds} s`)
    .join(', ')}`,
);
if (process.env.GYM_WRITE_DURATIONS === '1') {
  const recorded = Object.fromEntries(
    fileSeconds
      .filter(({ seconds }) => seconds >= RECORDED_FILE_SECONDS)
      .map(({ file, seconds }) => [file, seconds]),
  );
  writeFileSync(join(process.cwd(), 'test', 'durations.json'), `${JSON.stringify(recorded, null, 2)}\n`);
  console.log(
    `wrote test/durations.json (${Object.keys(recorded).length} files of ${RECORDED_FILE_SECONDS} s or more)`,
  );
}
const skipped = report.numPendingTests + report.numTodoTests;
const isDockerRequired = process.env.GYM_REQUIRE_DOCKER === '1';
if (isDockerRequired && skipped > 0) {
  const names = report.testResults.flatMap((file) =>
    file.assertionResults
      .filter((test) => test.status !== 'passed' && test.status !== 'failed')
      .map((test) => test.fullName),
  );
  console.error(`GYM_REQUIRE_DOCKER=1 and ${skipped} tests were skipped:\n  ${names.join('\n  ')}`);
}
const failed = report.numFailedTests + (isDockerRequired ? skipped : 0);
console.log(`${report.numPassedTests} passed, ${failed} failed, ${skipped} skipped`);
process.exit(vitest.status === 0 && failed === 0 ? 0 : 1);
