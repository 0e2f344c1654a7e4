/**
 * What SWE-bench runs for each repository (as its harness 4.1 defines it for the published
 * Python datasets, whose rows carry no test command): the test command per repository and
 * version, the commands run before it (Django's locale), and which log parser reads the output.
 * Repositories beyond these can be described by the environment's options (`repositories`).
 *
 * Not taken over: the per-version `install` step (a reinstall of the package in the image); the
 * images are built with the package installed, and our sandboxes have no network to reinstall.
 */
import { patchTargets } from '../../verifiers/patch-files.ts';
import type { TestRunner } from '../../verifiers/runner-exit.ts';
import type { LogParserName } from './log-parsers.ts';

export interface RepositorySpec {
  /** The test command; the test files of the test patch are appended to it. */
  testCommand: string;
  logParser: LogParserName;
  /** Run in the repository before the tests (exported variables stay set for them). */
  evalCommands?: string[];
  /**
   * The runner whose exit statuses judge the run (verifiers/runner-exit.ts). Absent: pytest when
   * the command runs it, else only the convention that a non-zero status means a failure.
   */
  testRunner?: TestRunner;
}

interface RepositoryTable {
  testCommand: string;
  logParser: LogParserName;
  testRunner?: TestRunner;
  /** Versions whose command differs from the repository's. */
  testCommandByVersion?: Record<string, string>;
  evalCommandsByVersion?: Record<string, string[]>;
}

// SWE-bench defines its pytest command twice; the second (`pytest -rA`) is the one in effect.
const PYTEST = 'pytest -rA';
const DJANGO = './tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1';
const DJANGO_LOCALE_EXPORTS = [
  'export LANG=en_US.UTF-8',
  'export LC_ALL=en_US.UTF-8',
  'export PYTHONIOENCODING=utf8',
  'export LANGUAGE=en_US:en',
];
const DJANGO_LOCALE_GEN = [
  "sed -i '/en_US.UTF-8/s/^# //g' /etc/locale.gen && locale-gen",
  'export LANG=en_US.UTF-8',
  'export LANGUAGE=en_US:en',
  'export LC_ALL=en_US.UTF-8',
];
const forVersions = <T>(versions: string[], value: T): Record<string, T> =>
  Object.fromEntries(versions.map((version) => [version, value]));

const pytestRepository = (logParser: LogParserName): RepositoryTable => ({ testCommand: PYTEST, logParser });

export const SWE_BENCH_REPOSITORIES: Readonly<Record<string, RepositoryTable>> = {
  'astropy/astropy': {
    testCommand: PYTEST,
    logParser: 'pytest_v2',
    testCommandByVersion: forVersions(
      ['0.1', '0.2', '0.3', '0.4', '1.1', '1.2', '1.3'],
      'pytest -rA -vv -o console_output_style=classic --tb=no',
    ),
  },
  'django/django': {
    testCommand: DJANGO,
    logParser: 'django',
    testRunner: 'django',
    testCommandByVersion: { '1.9': './tests/runtests.py --verbosity 2' },
    evalCommandsByVersion: {
      ...forVersions(['1.7', '1.8', '1.9', '1.10', '1.11', '2.0', '2.1', '2.2'], DJANGO_LOCALE_EXPORTS),
      ...forVersions(['3.0', '3.1', '3.2'], DJANGO_LOCALE_GEN),
    },
  },
  'marshmallow-code/marshmallow': pytestRepository('pytest'),
  'matplotlib/matplotlib': pytestRepository('matplotlib'),
  'mwaskom/seaborn': { testCommand: 'pytest --no-header -rA', logParser: 'seaborn' },
  'pallets/flask': pytestRepository('pytest'),
  'psf/requests': pytestRepository('pytest_options'),
  'pvlib/pvlib-python': pytestRepository('pytest'),
  'pydata/xarray': pytestRepository('pytest'),
  'pydicom/pydicom': pytestRepository('pytest_options'),
  'pylint-dev/astroid': pytestRepository('pytest'),
  'pylint-dev/pylint': pytestRepository('pytest_options'),
  'pytest-dev/pytest': pytestRepository('pytest'),
  'pyvista/pyvista': pytestRepository('pytest'),
  'scikit-learn/scikit-learn': pytestRepository('pytest_v2'),
  'sphinx-doc/sphinx': { testCommand: 'tox --current-env -epy39 -v --', logParser: 'pytest_v2' },
  'sqlfluff/sqlfluff': pytestRepository('pytest'),
  'sympy/sympy': {
    testCommand: "PYTHONWARNINGS='ignore::UserWarning,ignore::SyntaxWarning' bin/test -C --verbose",
    logParser: 'sympy',
    testRunner: 'sympy',
  },
};

/** The spec for a row's repository and version; `extra` (the environment's options) wins. */
export function repositorySpec(
  repo: string,
  version: string,
  extra: Readonly<Record<string, RepositorySpec>> = {},
): RepositorySpec | undefined {
  const configured = extra[repo];
  if (configured !== undefined) return configured;
  const table = SWE_BENCH_REPOSITORIES[repo];
  if (table === undefined) return undefined;
  const evalCommands = table.evalCommandsByVersion?.[version];
  return {
    testCommand: table.testCommandByVersion?.[version] ?? table.testCommand,
    logParser: table.logParser,
    ...(table.testRunner === undefined ? {} : { testRunner: table.testRunner }),
    ...(evalCommands === undefined ? {} : { evalCommands }),
  };
}

/** Files of these kinds in a test patch are data, not tests to run (SWE-bench's list; `csv` has no dot there). */
const NON_TEST_SUFFIXES = [
  '.json',
  '.png',
  'csv',
  '.txt',
  '.md',
  '.jpg',
  '.jpeg',
  '.pkl',
  '.yml',
  '.yaml',
  '.toml',
];

/**
 * What SWE-bench appends to the test command: the test patch's files minus data files; for
 * Django, as modules of its test runner (`tests/` and `.py` dropped, `/` made `.`).
 */
export function testDirectives(repo: string, testPatch: string): string[] {
  const files = patchTargets(testPatch).filter(
    (path) => !NON_TEST_SUFFIXES.some((suffix) => path.endsWith(suffix)),
  );
  if (repo !== 'django/django') return files;
  return files.map((path) => {
    let module = path.endsWith('.py') ? path.slice(0, -'.py'.length) : path;
    if (module.startsWith('tests/')) module = module.slice('tests/'.length);
    return module.replaceAll('/', '.');
  });
}
