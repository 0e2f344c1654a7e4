import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  djangoInterruptedPassNames,
  parseDjango,
  parseMatplotlib,
  parsePytest,
  parsePytestOptions,
  parsePytestV2,
  parseSeaborn,
  parseSympy,
} from './log-parsers.ts';

const asObject = (map: Map<string, string>) => Object.fromEntries(map);

// pytest -rA at the end of a run: the short test summary.
const PYTEST_LOG = `============================= test session starts ==============================
collected 7 items

tests/test_a.py ..F.sx                                                   [100%]

=========================== short test summary info ============================
PASSED tests/test_a.py::test_one
PASSED tests/test_a.py::test_param[a b]
FAILED tests/test_a.py::test_three - AssertionError: assert 1 == 2
SKIPPED [2] tests/test_a.py:40: no network
SKIPPED tests/test_a.py::test_skipped
XFAIL tests/test_a.py::test_known - reason: not yet
ERROR tests/test_b.py::test_setup - fixture 'db' not found
  PASSED tests/indented_is_not_a_summary_line
PASSEDX not_a_status
=================== 1 failed, 2 passed, 1 skipped, 1 error in 0.12s ===================
`;

describe('pytest parser (flask, xarray, pytest, astroid, marshmallow, ...)', () => {
  it('takes the first token after the status as the id, drops skip counts and messages', () => {
    expect(asObject(parsePytest(PYTEST_LOG))).toEqual({
      'tests/test_a.py::test_one': 'PASSED',
      // As SWE-bench: an id with a space is cut at it.
      'tests/test_a.py::test_param[a': 'PASSED',
      'tests/test_a.py::test_three': 'FAILED',
      'tests/test_a.py::test_skipped': 'SKIPPED',
      'tests/test_a.py::test_known': 'XFAIL',
      'tests/test_b.py::test_setup': 'ERROR',
    });
  });
});

describe('pytest_options parser (requests, pylint, pydicom)', () => {
  it('reduces an absolute path parameter to its last part, keeps other parameters', () => {
    const log = [
      'PASSED tests/test_requests.py::test_path[/home/ci/build/data/file.txt]',
      'PASSED tests/test_requests.py::test_url[//host/share]',
      'FAILED tests/test_requests.py::test_glob[/tmp/*.py] - boom',
      'PASSED tests/test_requests.py::test_plain[utf-8]',
      'PASSED tests/test_requests.py::test_none',
    ].join('\n');
    expect(asObject(parsePytestOptions(log))).toEqual({
      'tests/test_requests.py::test_path[/file.txt]': 'PASSED',
      'tests/test_requests.py::test_url[//host/share]': 'PASSED',
      'tests/test_requests.py::test_glob[/tmp/*.py]': 'FAILED',
      'tests/test_requests.py::test_plain[utf-8]': 'PASSED',
      'tests/test_requests.py::test_none': 'PASSED',
    });
  });
});

describe('pytest_v2 parser (astropy, scikit-learn, sphinx)', () => {
  it('strips colours, keeps ids with spaces whole, cuts failure messages, reads old-style lines', () => {
    const log = [
      '\u001b[32mPASSED\u001b[0m sklearn/tests/test_base.py::test_clone',
      'PASSED astropy/io/tests/test_x.py::test_grammar[log(photon cm s)]',
      'FAILED sphinx/tests/test_build.py::test_html - AssertionError: a - b',
      'SKIPPED [1] sklearn/tests/test_base.py:12: needs pandas',
      // tox -v / pytest -v without -rA prints the status last.
      'tests/test_ext_autodoc.py::test_autodoc PASSED',
      'tests/test_ext_autodoc.py::test_other FAILED',
    ].join('\n');
    expect(asObject(parsePytestV2(log))).toEqual({
      'sklearn/tests/test_base.py::test_clone': 'PASSED',
      'astropy/io/tests/test_x.py::test_grammar[log(photon cm s)]': 'PASSED',
      'sphinx/tests/test_build.py::test_html': 'FAILED',
      'tests/test_ext_autodoc.py::test_autodoc': 'PASSED',
      'tests/test_ext_autodoc.py::test_other': 'FAILED',
    });
  });
});

describe('matplotlib parser', () => {
  it('spells mouse buttons as numbers, as the datasets list them', () => {
    const log = [
      'PASSED lib/matplotlib/tests/test_widgets.py::test_span_selector[MouseButton.LEFT]',
      'FAILED lib/matplotlib/tests/test_widgets.py::test_lasso[MouseButton.RIGHT] - x',
      'SKIPPED [3] lib/matplotlib/testing/compare.py:285: Cannot compare svg files',
    ].join('\n');
    expect(asObject(parseMatplotlib(log))).toEqual({
      'lib/matplotlib/tests/test_widgets.py::test_span_selector[1]': 'PASSED',
      'lib/matplotlib/tests/test_widgets.py::test_lasso[3]': 'FAILED',
    });
  });
});

describe('seaborn parser', () => {
  it('reads -v progress lines and the -rA summary', () => {
    const log = [
      'tests/test_core.py::TestHue::test_init PASSED [ 10%]',
      'tests/test_core.py::TestHue::test_map FAILED [ 20%]',
      'PASSED tests/test_axisgrid.py::TestFacetGrid::test_data',
      'FAILED tests/test_core.py::TestHue::test_map - ValueError',
    ].join('\n');
    expect(asObject(parseSeaborn(log))).toEqual({
      'tests/test_core.py::TestHue::test_init': 'PASSED',
      'tests/test_core.py::TestHue::test_map': 'FAILED',
      'tests/test_axisgrid.py::TestFacetGrid::test_data': 'PASSED',
    });
  });
});

describe('django parser', () => {
  // ./tests/runtests.py --verbosity 2: one line per test, then FAIL:/ERROR: sections.
  const log = `Testing against Django installed in '/testbed/django' with up to 1 processes
Creating test database for alias 'default' ('file:memorydb_default?mode=memory&cache=shared')...
test_add (utils_tests.test_text.TestUtilsText) ... ok
test_format (utils_tests.test_text.TestUtilsText) ... FAIL
test_lazy (utils_tests.test_text.TestUtilsText) ... ERROR
test_slow (utils_tests.test_text.TestUtilsText) ... skipped 'slow test'
test_noisy (utils_tests.test_text.TestUtilsText) ... some output the test printed
ok
test_upper (utils_tests.test_text.TestUtilsText)
Docstring line. ...  OK
test_server (view_tests.tests.ViewTests) ... Internal Server Error: /raise/
ok

======================================================================
FAIL: test_format (utils_tests.test_text.TestUtilsText)
----------------------------------------------------------------------
Traceback (most recent call last):
AssertionError: 'a' != 'b'

======================================================================
ERROR: test_other_error (utils_tests.test_text.TestUtilsText)
----------------------------------------------------------------------
Ran 7 tests in 0.010s

FAILED (failures=1, errors=2, skipped=1)
`;
  it('reads ok / FAIL / ERROR / skipped lines, FAIL: and ERROR: headers, and passes split over lines', () => {
    expect(asObject(parseDjango(log))).toEqual({
      'test_add (utils_tests.test_text.TestUtilsText)': 'PASSED',
      'test_format (utils_tests.test_text.TestUtilsText)': 'FAILED',
      // "FAIL: name (...)" keeps only the first token after the colon, as SWE-bench's does.
      test_format: 'FAILED',
      'test_lazy (utils_tests.test_text.TestUtilsText)': 'ERROR',
      test_other_error: 'ERROR',
      'test_slow (utils_tests.test_text.TestUtilsText)': 'SKIPPED',
      'test_noisy (utils_tests.test_text.TestUtilsText)': 'PASSED',
      'Docstring line.': 'PASSED',
      'test_server (view_tests.tests.ViewTests)': 'PASSED',
    });
  });
});

describe('sympy parser', () => {
  // bin/test -C --verbose: one line per test, then a section per failure or error.
  const log = `============================= test process starts ==============================
executable:         /opt/miniconda3/envs/testbed/bin/python  (3.9.19-final-0) [CPython]
sympy/core/tests/test_basic.py[3]
test__aresame ok
test_structure F
test_equality E
sympy/sets/tests/test_sets.py[1]
test_union ok

________________________________________________________________________________
______________ sympy/core/tests/test_basic.py:test_structure ___________________
Traceback (most recent call last):
AssertionError
============= tests finished: 2 passed, 1 failed, 1 exceptions in 0.50 seconds =============
DO *NOT* COMMIT!
`;
  it('reads test lines and failure headers', () => {
    expect(asObject(parseSympy(log))).toEqual({
      test__aresame: 'PASSED',
      test_structure: 'FAILED',
      test_equality: 'ERROR',
      test_union: 'PASSED',
      'sympy/core/tests/test_basic.py:test_structure': 'FAILED',
    });
  });
});

describe('log parsers on hostile logs (the agent writes the test output)', () => {
  // The regexes SWE-bench uses, kept here as the reference the hand-written readings must equal.
  const sympyByRegex = (log: string) =>
    [...log.matchAll(/(_*) (.*)\.py:(.*) (_*)/g)].map((match) => `${match[2]}.py:${match[3]}`);
  const optionsByRegex = (id: string) => /^(.*?)\[(.*)\]/.exec(id);
  const text = (alphabet: string[]) =>
    fc.array(fc.constantFrom(...alphabet), { maxLength: 16 }).map((chars) => chars.join(''));

  it('read the failure headers and parametrised ids exactly as the regexes did', () => {
    fc.assert(
      fc.property(text([' ', ' ', '_', 'x.py:', '.py', ':', 'a', '\n', '\r', '\u2028']), (log) => {
        // No line starts with `test_`: every entry is a failure header, in the order found.
        const parsed = parseSympy(log);
        expect([...parsed.keys()]).toEqual([...new Set(sympyByRegex(log))]);
        expect([...new Set(parsed.values())]).toEqual(parsed.size === 0 ? [] : ['FAILED']);
      }),
      { numRuns: 2000 },
    );
    fc.assert(
      fc.property(text(['[', ']', 'a', '/', '/x', '*']), (id) => {
        const parsed = [...parsePytestOptions(`PASSED t${id}`).keys()];
        const match = optionsByRegex(`t${id}`);
        const option = match?.[2] ?? '';
        const reduced =
          option.startsWith('/') && !option.startsWith('//') && !option.includes('*')
            ? `/${option.split('/').at(-1)}`
            : option;
        expect(parsed).toEqual(match === null ? [`t${id}`] : [`${match[1]}[${reduced}]`]);
      }),
      { numRuns: 1000 },
    );
  });

  it('stay linear in a line of spaces or of `[` (the regexes took minutes on 8 MiB)', () => {
    const spaces = ' '.repeat(400_000);
    expect(asObject(parseSympy(`${spaces}x.py:y${spaces}\n${spaces}`))).toEqual({
      [`${spaces.slice(1)}x.py:y${spaces.slice(1)}`]: 'FAILED',
    });
    const brackets = '['.repeat(400_000);
    expect(asObject(parsePytestOptions(`PASSED t${brackets}\nPASSED u${brackets}a]`))).toEqual({
      [`t${brackets}`]: 'PASSED',
      [`u[${brackets.slice(1)}a]`]: 'PASSED',
    });
  });
});

describe('django parser on hostile logs', () => {
  // SWE-bench's regexes for a pass whose `ok` comes lines after its `...`: the reference.
  const INTERRUPTED = [
    /^(.*?)\s\.\.\.\sTesting against Django installed in ([\s\S]*?) silenced\)\.\nok$/gm,
    /^(.*?)\s\.\.\.\sInternal Server Error: \/(.*)\/\nok$/gm,
    /^(.*?)\s\.\.\.\sSystem check identified no issues \(0 silenced\)\nok$/gm,
  ];
  const byRegex = (log: string) =>
    INTERRUPTED.flatMap((pattern) => [...log.matchAll(pattern)].map((match) => match[1]!));

  it('reads the passes interrupted by output exactly as the regexes did', () => {
    // Lines that nearly match, in pieces each rule may trip on, with noise between them.
    const pick = (...options: string[]) => fc.constantFrom(...options);
    const record = fc
      .tuple(
        pick('', 'x', 'x y', '...'),
        pick(' ... ', '\t...\t', ' ...\n', '\n... ', '\r...\u2028', ' .. ', '...', ' ...x'),
        pick(
          'Testing against Django installed in ',
          'Internal Server Error: /',
          'System check identified no issues (0 silenced)\nok',
          'System check identified no issues (0 silenced)\n',
        ),
        pick('', 'a', 'a/', ' ... ', '\n'),
        pick(
          '',
          '/\nok',
          '/\rok',
          '/\nokx',
          '/\nok\n',
          ' silenced).\nok',
          ' silenced).\nokk',
          ' silenced).\n',
          '\nok',
        ),
        pick('', '\n', '\r', '\u2028', ' '),
      )
      .map((parts) => parts.join(''));
    const noise = pick(' ', '\n', '\r', 'x', '...', 'ok', '/', ' silenced).\nok');
    fc.assert(
      fc.property(
        fc.array(fc.oneof(record, noise), { maxLength: 8 }).map((parts) => parts.join('')),
        (log) => {
          expect(djangoInterruptedPassNames(log)).toEqual(byRegex(log));
        },
      ),
      { numRuns: 5000 },
    );
  });

  it('stays linear in a log the agent fills with beginnings that never end (the regexes took hours on 8 MiB)', () => {
    const testing = 'test_x (a.B) ... Testing against Django installed in y\n'.repeat(40_000);
    const errors = '\t...\tInternal Server Error: /'.repeat(40_000);
    expect(djangoInterruptedPassNames(`${testing}${errors}\n`)).toEqual([]);
    // One real ending after them all: the first beginning takes it, as the lazy regex did.
    expect(djangoInterruptedPassNames(`${testing}z (0 silenced).\nok\n`)).toEqual(['test_x (a.B)']);
  });
});
