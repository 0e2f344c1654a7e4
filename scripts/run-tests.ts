/**
 * Runs the vitest suite and ends with one plain line, `N passed, N failed, N skipped`, that any
 * CI can read. With GYM_REQUIRE_DOCKER=1 a skipped test is a failure: in CI every test must run.
 * Extra arguments go to vitest (for example a file filter).
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

interface VitestReport {
  numPassedTests: number;
  numFailedTests: number;
  numPendingTests: number;
  numTodoTests: number;
  numTotalTests: number;
  testResults: Array<{ name: string; assertionResults: Array<{ fullName: string; status: string }> }>;
}

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
