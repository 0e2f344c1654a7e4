/**
 * What a test runner's own exit status says about its run, held against the log it printed.
 *
 * The log is not evidence on its own: the code under test is the agent's and runs inside the
 * runner, so it can print `PASSED` lines for every test. The exit status is the runner process's
 * own, as the exec result reports it (never a line of text in the log), and where the runner
 * defines what its statuses mean, a status that says the run did not pass wins over the log:
 *
 * - pytest: 0 every selected test passed; 1 some failed; 2 interrupted (a collection error, an
 *   interrupt); 3 internal error; 4 usage error; 5 no tests collected. 1 is believed only with a
 *   failure in the log (a test outside FAIL_TO_PASS / PASS_TO_PASS may fail, as SWE-bench allows);
 *   2 to 5 never grade as a pass, whatever the log says.
 * - Django's `tests/runtests.py` and sympy's `bin/test`: 0 every test passed, 1 not (failures or a
 *   crash); 1 is believed only with a failure in the log, any other status never grades as a pass.
 * - Any other command: its semantics are not known here, so only the common convention holds (0
 *   passed, anything else means something failed): a non-zero status is believed only with a
 *   failure in the log.
 *
 * For every runner, a status above 128 is the shell's report of a signal, and a run that was
 * killed or ran out of memory did not finish: the runner never gave its verdict, so nothing it
 * printed before counts. Everything here is the agent's doing (only its code runs in the tests),
 * so a disbelieved log is reward 0 with the reason, never an infrastructure error.
 */
import type { ExecStatus } from '../../core/schemas/exec.ts';
import type { TestStatus } from './pytest-log.ts';

/** Test runners whose exit statuses are known here. */
export const TEST_RUNNERS = ['pytest', 'django', 'sympy'] as const;
export type TestRunner = (typeof TEST_RUNNERS)[number];

/** How the test run's exec ended, as the daemon saw it. */
export interface TestRunEnd {
  status: ExecStatus;
  exitCode: number | null;
}

const PYTEST_STATUSES: Readonly<Record<number, string>> = {
  2: 'the run was interrupted (a collection error or an interrupt)',
  3: 'an internal error',
  4: 'a usage error (its command line or configuration)',
  5: 'no tests were collected',
};

const RUNNER_NAMES: Readonly<Record<TestRunner, string>> = {
  pytest: 'pytest',
  django: "Django's runtests.py",
  sympy: "sympy's bin/test",
};

/** 128 + N is how a shell reports a child killed by signal N. */
const SIGNAL_BASE = 128;

/** Unquoted characters that make a command line more than one simple command. */
const COMPOUND = new Set([';', '|', '(', ')', '`', '\n']);

/**
 * The words of a shell command line when it is one simple command (quotes removed), else null.
 * Only enough of the shell's grammar to recognise `VAR=value ... python -m pytest ARGS`.
 */
function simpleCommandWords(command: string): string[] | null {
  const words: string[] = [];
  let word: string | null = null;
  let quote: "'" | '"' | null = null;
  for (let index = 0; index < command.length; index++) {
    const character = command[index]!;
    if (quote !== null) {
      if (character === quote) quote = null;
      else if (character === '\\' && quote === '"' && index + 1 < command.length) word += command[++index]!;
      else word += character;
      continue;
    }
    if (character === "'" || character === '"') {
      quote = character;
      word ??= '';
    } else if (character === '\\' && index + 1 < command.length) {
      word = (word ?? '') + command[++index]!;
    } else if (COMPOUND.has(character)) {
      return null;
    } else if (character === '&') {
      // `2>&1` and `&>` are redirections; any other `&` is a list or a background job.
      const previous = command[index - 1];
      if (previous !== '>' && previous !== '<' && command[index + 1] !== '>') return null;
      word = (word ?? '') + character;
    } else if (character === ' ' || character === '\t') {
      if (word !== null) words.push(word);
      word = null;
    } else {
      word = (word ?? '') + character;
    }
  }
  if (quote !== null) return null;
  if (word !== null) words.push(word);
  return words;
}

/**
 * The runner a test command runs, when it is one simple command whose program is pytest
 * (`pytest`, `py.test`, `python3 -m pytest`, after any `VAR=value` and `env`); undefined when the
 * command is anything else (its runner's statuses are then not assumed).
 */
export function testRunnerOf(command: string): TestRunner | undefined {
  const words = simpleCommandWords(command);
  if (words === null) return undefined;
  let at = 0;
  while (at < words.length && (/^[A-Za-z_][A-Za-z0-9_]*=/.test(words[at]!) || words[at] === 'env')) at++;
  const program = words[at]?.split('/').at(-1);
  if (program === undefined) return undefined;
  if (/^(pytest|py\.test)(-?\d[\d.]*)?$/.test(program)) return 'pytest';
  if (!/^python(\d[\d.]*)?$/.test(program)) return undefined;
  // The interpreter's own options before `-m`, each a single word (`-I`, `-B`, `-Wignore`).
  for (let next = at + 1; next < words.length; next++) {
    const option = words[next]!;
    if (option === '-m') return words[next + 1] === 'pytest' ? 'pytest' : undefined;
    if (option.startsWith('-m')) return option === '-mpytest' ? 'pytest' : undefined;
    if (!option.startsWith('-') || option === '-c' || option === '-') return undefined;
  }
  return undefined;
}

const reportsFailure = (statuses: ReadonlyMap<string, TestStatus>) =>
  [...statuses.values()].some((status) => status === 'FAILED' || status === 'ERROR');

/**
 * Why the log of a test run must not be graded as it reads, or null when it may be: the exec's
 * end (status and exit code, as the daemon saw them) is held against the runner's own meaning of
 * its exit statuses (`runner` undefined: only the common convention). A timeout and a lost
 * sandbox are for the caller to decide before this.
 */
export function distrustedRun(
  runner: TestRunner | undefined,
  end: TestRunEnd,
  statuses: ReadonlyMap<string, TestStatus>,
): string | null {
  const name = runner === undefined ? 'the test command' : RUNNER_NAMES[runner];
  if (end.status === 'oom')
    return `the test run ran out of memory (status oom) before ${name} gave its result`;
  if (end.status !== 'ok' || end.exitCode === null)
    return `the test run ended with status ${end.status}${end.exitCode === null ? '' : ` (exit ${end.exitCode})`} before ${name} gave its result`;
  const exitCode = end.exitCode;
  if (exitCode === 0) return null;
  if (exitCode > SIGNAL_BASE && exitCode <= SIGNAL_BASE + 64)
    return `${name} exited ${exitCode}: it was killed by signal ${exitCode - SIGNAL_BASE} before it gave its result`;
  const failureExplains = exitCode === 1 || runner === undefined;
  if (failureExplains) {
    if (reportsFailure(statuses)) return null;
    return `${name} exited ${exitCode}${runner === 'pytest' ? ' (some tests failed)' : ''} while its log reports no failure`;
  }
  if (runner === 'pytest')
    return `pytest exited ${exitCode}: ${PYTEST_STATUSES[exitCode] ?? 'a status pytest does not define'}`;
  return `${name} exited ${exitCode}, which it does only when the run did not pass (0 all passed, 1 not)`;
}
