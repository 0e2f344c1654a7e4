/**
 * SWE-bench's per-repository test-log parsers, written from the behaviour of its harness
 * (`log_parsers/python.py`, with the fixes of its 5.x line): each turns a test run's output into
 * test id -> status, and grading looks the FAIL_TO_PASS / PASS_TO_PASS ids up in that map, so an
 * id must come out exactly as SWE-bench's would or a correct patch scores 0.
 *
 * - `pytest`: pytest `-rA` summary lines `STATUS id`; the id is the first token after the status.
 * - `pytest_options`: as `pytest`, and a parametrised id whose parameter is an absolute path keeps
 *   only `/` + the path's last part (the datasets were made on another machine).
 * - `pytest_v2`: ANSI colour codes and control characters stripped; the id is every token after
 *   the status (ids with spaces survive); also old-style lines that END with the status word.
 * - `django`: Django's runner at verbosity 2: `name ... ok|skipped|FAIL|ERROR`, `FAIL: name`,
 *   `ERROR: name`, and the multi-line quirks where output lands between `...` and `ok`.
 * - `sympy`: sympy's `bin/test --verbose`: `test_name ok|F|E` lines and `___ path.py:test ___`
 *   failure headers.
 * - `seaborn`, `matplotlib`: pytest variants those repositories need.
 */
import type { TestLogParser, TestStatus } from '../../verifiers/pytest-log.ts';

const STATUSES: readonly TestStatus[] = ['FAILED', 'PASSED', 'SKIPPED', 'ERROR', 'XFAIL'];
const isStatus = (word: string | undefined): word is TestStatus =>
  word !== undefined && (STATUSES as readonly string[]).includes(word);
const words = (line: string) => line.split(/\s+/).filter((word) => word !== '');
/** pytest's `SKIPPED [3] path:line: reason` summary: `[3]` is a count, not a test id. */
const isSkipSummary = (status: string, id: string) => status === 'SKIPPED' && /^\[\d+\]$/.test(id);

/** The `STATUS id` lines of pytest -rA, the id being the first token after the status. */
function summaryLines(log: string, rewrite: (line: string) => string = (line) => line) {
  const entries: Array<[string, TestStatus]> = [];
  for (const raw of log.split('\n')) {
    let line = rewrite(raw);
    const first = line.split(/\s/, 1)[0];
    if (!isStatus(first)) continue;
    // A failure's message follows " - ": without the separator it cannot join the id.
    if (first === 'FAILED') line = line.replaceAll(' - ', ' ');
    const [status, id] = words(line);
    if (id === undefined || isSkipSummary(status!, id)) continue;
    entries.push([id, status as TestStatus]);
  }
  return entries;
}

export const parsePytest: TestLogParser = (log) => new Map(summaryLines(log));

export const parsePytestOptions: TestLogParser = (log) => {
  const results = new Map<string, TestStatus>();
  for (const [id, status] of summaryLines(log)) {
    // SWE-bench's `^(.*?)\[(.*)\]`, by hand: that regex is quadratic in a run of `[` (the id is
    // the test's output, which the agent controls), and this reads the same: up to the first `[`,
    // then up to the last `]` (an id is one token: no line break for `.` to stop at).
    const open = id.indexOf('[');
    const close = id.lastIndexOf(']');
    if (open === -1 || close <= open) {
      results.set(id, status);
      continue;
    }
    let option = id.slice(open + 1, close);
    if (option.startsWith('/') && !option.startsWith('//') && !option.includes('*'))
      option = `/${option.split('/').at(-1)}`;
    results.set(`${id.slice(0, open)}[${option}]`, status);
  }
  return results;
};

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is removed.
const CONTROL = /[\u0001-\u001f]/g;

export const parsePytestV2: TestLogParser = (log) => {
  const results = new Map<string, TestStatus>();
  for (const raw of log.split('\n')) {
    // The colour code's ESC goes with the other control characters; `[32m` is what is left.
    const line = raw.replace(/\[(\d+)m/g, '').replace(CONTROL, '');
    const first = line.split(/\s/, 1)[0];
    if (isStatus(first)) {
      const kept = first === 'FAILED' ? line.split(' - ', 1)[0]! : line;
      const tokens = words(kept);
      if (tokens.length >= 2 && !isSkipSummary(tokens[0]!, tokens[1]!))
        results.set(tokens.slice(1).join(' '), first);
      continue;
    }
    // Older pytest (-v without -rA) ends the line with the status: `path::test PASSED`.
    const tokens = words(line);
    const last = tokens.at(-1);
    if (tokens.length >= 2 && isStatus(last)) results.set(tokens.slice(0, -1).join(' '), last);
  }
  return results;
};

export const parseMatplotlib: TestLogParser = (log) =>
  new Map(
    summaryLines(log, (line) =>
      line.replaceAll('MouseButton.LEFT', '1').replaceAll('MouseButton.RIGHT', '3'),
    ),
  );

export const parseSeaborn: TestLogParser = (log) => {
  const results = new Map<string, TestStatus>();
  for (const line of log.split('\n')) {
    const parts = words(line);
    if (parts.length < 2) continue;
    if (line.startsWith('FAILED')) results.set(parts[1]!, 'FAILED');
    else if (line.includes(' PASSED ')) {
      // `path::test PASSED [ 10%]` from -v progress lines.
      if (parts[1] === 'PASSED') results.set(parts[0]!, 'PASSED');
    } else if (line.startsWith('PASSED')) results.set(parts[1]!, 'PASSED');
  }
  return results;
};

const DJANGO_PASS_SUFFIXES = [' ... ok', ' ... OK', ' ...  OK'];
const isLineBreak = (char: string | undefined) =>
  char === '\n' || char === '\r' || char === '\u2028' || char === '\u2029';
const isSpace = (char: string | undefined) => char !== undefined && /^\s$/.test(char);

/**
 * `find(from)`: where `needle` next occurs at or after `from` (-1: nowhere). Asked with `from` that
 * never decreases, it scans each part of the text once: an answer stands until `from` passes it.
 */
function forwardFinder(text: string, needle: string | RegExp): (from: number) => number {
  let askedFrom = Number.POSITIVE_INFINITY;
  let found = -1;
  const regex = typeof needle === 'string' ? null : new RegExp(needle.source, 'g');
  return (from) => {
    if (from >= askedFrom && (found === -1 || from <= found)) return found;
    askedFrom = from;
    if (regex === null) found = text.indexOf(needle as string, from);
    else {
      regex.lastIndex = from;
      found = regex.exec(text)?.index ?? -1;
    }
    return found;
  };
}

/**
 * Output that Django's runner sometimes prints between a test's `...` and its `ok`: SWE-bench's
 * regexes `^(.*?)\s\.\.\.\s<literal><tail>` (multi-line), where the tail is
 * `([\s\S]*?) silenced\)\.\nok$`, `(.*)\/\nok$` or `$`. Read by hand: as regexes they were
 * quadratic in a log the agent writes (a line of `\t...\tInternal Server Error: /` repeated, or
 * many `Testing against ...` lines with no end: 8 MiB of them took hours). `tail(at)` says where
 * a match whose literal ends at `at` ends (null: none). Reads what the regexes read, in the same
 * order (a property test holds them equal), the test name (group 1) of each match.
 */
function djangoInterruptedPasses(
  log: string,
  literal: string,
  tail: (at: number) => number | null,
): string[] {
  const names: string[] = [];
  const nextBreak = forwardFinder(log, /[\n\r\u2028\u2029]/);
  const nextDots = forwardFinder(log, '...');
  const lineEnd = (from: number) => {
    const found = nextBreak(from);
    return found === -1 ? log.length : found;
  };
  for (let start = 0; start < log.length; ) {
    // `(.*?)` stays on the line; the `\s` after it may be the line's break itself.
    const end = lineEnd(start);
    let matchEnd: number | null = null;
    for (let dots = nextDots(start + 1); dots !== -1 && dots - 1 <= end; dots = nextDots(dots + 1)) {
      const space = dots - 1;
      if (!isSpace(log[space]) || !isSpace(log[dots + 3]) || !log.startsWith(literal, dots + 4)) continue;
      matchEnd = tail(dots + 4 + literal.length);
      if (matchEnd !== null) {
        names.push(log.slice(start, space));
        break;
      }
    }
    // The next match starts on a line that begins at or after this one's end.
    if (matchEnd === null) start = end + 1;
    else start = isLineBreak(log[matchEnd - 1]) ? matchEnd : lineEnd(matchEnd) + 1;
  }
  return names;
}

/** Where `ok` ends a line at `at` (JavaScript's multi-line `$`), else null. */
const okLineEnd = (log: string, at: number) =>
  log.startsWith('ok', at) && (at + 2 === log.length || isLineBreak(log[at + 2])) ? at + 2 : null;

/** The test names of the interrupted passes, each pattern's in the order found (exported for tests). */
export function djangoInterruptedPassNames(log: string): string[] {
  const silenced = forwardFinder(log, ' silenced).\n');
  const nextBreak = forwardFinder(log, /[\n\r\u2028\u2029]/);
  // No ending after a point means none after any later one: asked once, not again per line.
  let noEndingFrom = Number.POSITIVE_INFINITY;
  return [
    // `([\s\S]*?) silenced\)\.\nok$`: the first ` silenced).` line followed by an `ok` line.
    ...djangoInterruptedPasses(log, 'Testing against Django installed in ', (at) => {
      if (at >= noEndingFrom) return null;
      for (let found = silenced(at); found !== -1; found = silenced(found + 1)) {
        const end = okLineEnd(log, found + ' silenced).\n'.length);
        if (end !== null) return end;
      }
      noEndingFrom = at;
      return null;
    }),
    // `(.*)\/\nok$`: the rest of the line ends with `/`, its break is `\n`, the next line is `ok`.
    ...djangoInterruptedPasses(log, 'Internal Server Error: /', (at) => {
      const lineBreak = nextBreak(at);
      if (lineBreak === -1 || log[lineBreak] !== '\n' || lineBreak - 1 < at || log[lineBreak - 1] !== '/')
        return null;
      return okLineEnd(log, lineBreak + 1);
    }),
    ...djangoInterruptedPasses(log, 'System check identified no issues (0 silenced)\nok', (at) =>
      at === log.length || isLineBreak(log[at]) ? at : null,
    ),
  ];
}

export const parseDjango: TestLogParser = (log) => {
  const results = new Map<string, TestStatus>();
  let previous: string | undefined;
  for (const raw of log.split('\n')) {
    let line = raw.trim();
    if (line.includes('--version is equivalent to version'))
      results.set('--version is equivalent to version', 'PASSED');
    if (line.includes(' ... ')) previous = line.split(' ... ')[0];
    const suffix = DJANGO_PASS_SUFFIXES.find((candidate) => line.endsWith(candidate));
    if (suffix !== undefined) {
      // One instance (django-7188) prints a migration line before the test on the same line.
      if (line.startsWith('Applying sites.0002_alter_domain_unique...test_no_migrations'))
        line = line.slice(line.indexOf('...') + 3).trim();
      results.set(line.slice(0, line.lastIndexOf(suffix)), 'PASSED');
    }
    if (line.includes(' ... skipped')) results.set(line.split(' ... skipped')[0]!, 'SKIPPED');
    if (line.endsWith(' ... FAIL')) results.set(line.split(' ... FAIL')[0]!, 'FAILED');
    if (line.startsWith('FAIL:')) {
      const name = words(line)[1];
      if (name !== undefined) results.set(name, 'FAILED');
    }
    if (line.endsWith(' ... ERROR')) results.set(line.split(' ... ERROR')[0]!, 'ERROR');
    if (line.startsWith('ERROR:')) {
      const name = words(line)[1];
      if (name !== undefined) results.set(name, 'ERROR');
    }
    // The test passed, but printed something between its `...` and its `ok`.
    if (line.startsWith('ok') && previous !== undefined) results.set(previous, 'PASSED');
  }
  for (const name of djangoInterruptedPassNames(log)) results.set(name, 'PASSED');
  return results;
};

/** The line breaks of a JavaScript regex's `.`: a match of `(.*)` stays between two of them. */
const LINE_BREAKS = /[\n\r\u2028\u2029]/;

/**
 * What SWE-bench's `(_*) (.*)\.py:(.*) (_*)` finds, `path.py:name` for each match, by hand: the
 * regex is quadratic in a line of spaces (80,000 of them: 14 s; a log may hold 8 MiB). It reads
 * the same: a match lies within one line; it starts at the line's first space, its path runs to
 * the last `.py:` that a later space follows, its name from there to the line's last space; and
 * after that space no other can start a match, so there is at most one per line.
 */
function sympyFailureHeaders(log: string): string[] {
  const headers: string[] = [];
  for (const line of log.split(LINE_BREAKS)) {
    const first = line.indexOf(' ');
    const last = line.lastIndexOf(' ');
    if (first === -1 || last - 4 < first + 1) continue;
    const py = line.lastIndexOf('.py:', last - 4);
    if (py < first + 1) continue;
    headers.push(`${line.slice(first + 1, py)}.py:${line.slice(py + 4, last)}`);
  }
  return headers;
}

export const parseSympy: TestLogParser = (log) => {
  const results = new Map<string, TestStatus>();
  // Failure and error sections are headed `____ sympy/x/tests/test_y.py:test_z ____`.
  for (const header of sympyFailureHeaders(log)) results.set(header, 'FAILED');
  for (const raw of log.split('\n')) {
    const line = raw.trim();
    if (!line.startsWith('test_')) continue;
    const name = words(line)[0]!;
    if (line.endsWith(' E')) results.set(name, 'ERROR');
    if (line.endsWith(' F')) results.set(name, 'FAILED');
    if (line.endsWith(' ok')) results.set(name, 'PASSED');
  }
  return results;
};

/** Parsers by name (SWE-bench's registry calls them `parse_log_<name>`, plus per-repository aliases). */
export const LOG_PARSERS: Readonly<Record<string, TestLogParser>> = {
  pytest: parsePytest,
  pytest_options: parsePytestOptions,
  pytest_v2: parsePytestV2,
  django: parseDjango,
  sympy: parseSympy,
  seaborn: parseSeaborn,
  matplotlib: parseMatplotlib,
};
export type LogParserName = keyof typeof LOG_PARSERS;
