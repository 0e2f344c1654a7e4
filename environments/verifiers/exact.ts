/**
 * The exact verifier: the chosen option letter (or a whole string) must equal the expected answer.
 * Option letters are graded as NeMo Gym's MCQA server grades them (its `resources_servers/mcqa`):
 * the row's `template_metadata.output_regex` first when it has one, then its `grading_mode`, by
 * default `strict_single_letter_boxed` (only the last `\boxed{}`); `lenient_boxed` also takes an
 * option's text inside that box, `lenient_answer_colon` the text after the first `Answer:`. Options
 * may be more than A-D (NeMo Gym's rows list `options` as `[{"A": ...}, ...]`, up to J and beyond).
 * An expected answer that is no single letter (`42`) is compared with the whole trimmed submission.
 *
 * The answer is the model's (DESIGN.md 7a): the row's `output_regex` runs on it in a worker with a
 * time limit (bounded-regex.ts), and the fixed readings here are linear in its length. An answer on
 * which the row's regex runs past its limit is graded 0 with the reason (see {@link verifyExact}).
 */
import { type BoundedRegexRunner, sharedRegexRunner } from './bounded-regex.ts';
import type { Verdict } from './verifier.ts';

const DEFAULT_LETTERS = ['A', 'B', 'C', 'D'];

/** The modes a NeMo Gym MCQA row may name; any other is an invalid row. */
export const GRADING_MODES = ['strict_single_letter_boxed', 'lenient_boxed', 'lenient_answer_colon'] as const;
export type GradingMode = (typeof GRADING_MODES)[number];
export const DEFAULT_GRADING_MODE: GradingMode = 'strict_single_letter_boxed';

export interface ChoiceGrading {
  /** The row's options (`[{"A": text}, ...]` or `{"A": text}`); absent means A-D, no texts. */
  options?: unknown;
  /** NeMo Gym's `grading_mode`; default `strict_single_letter_boxed`. */
  gradingMode?: GradingMode;
  /** NeMo Gym's `template_metadata.output_regex`: tried first, the last match of each in turn. */
  outputRegex?: string | readonly string[];
}

/** Each option's letter and text (null when the row gives none), from a list of one-key objects or an object. */
function optionEntries(options: unknown): Array<[string, string | null]> {
  const pairs = Array.isArray(options)
    ? options.flatMap((option) =>
        typeof option === 'object' && option !== null
          ? Object.entries(option as Record<string, unknown>)
          : [],
      )
    : typeof options === 'object' && options !== null
      ? Object.entries(options as Record<string, unknown>)
      : [];
  return pairs
    .map(([key, text]): [string, string | null] => [
      key.trim().toUpperCase(),
      typeof text === 'string' ? text : null,
    ])
    .filter(([key]) => /^[A-Z]$/.test(key));
}

/** The option letters of a row's `options`: a list of one-key objects, or an object. */
export function optionLetters(options: unknown): string[] | undefined {
  const letters = optionEntries(options).map(([letter]) => letter);
  return letters.length === 0 ? undefined : [...new Set(letters)];
}

/** What the last `\boxed{...}` holds (nested braces counted), or null. */
function lastBoxed(text: string): string | null {
  const start = text.lastIndexOf('\\boxed{');
  if (start < 0) return null;
  let depth = 1;
  for (let index = start + '\\boxed{'.length; index < text.length; index += 1) {
    if (text[index] === '{') depth += 1;
    else if (text[index] === '}') {
      depth -= 1;
      if (depth === 0) return text.slice(start + '\\boxed{'.length, index);
    }
  }
  return null;
}

/**
 * Without its `\text{...}` wrappers, as many as there are, and the white space inside them. By
 * hand, not `/^\\text\{\s*([\s\S]*?)\s*\}$/` as before: that regex is cubic in a run of white
 * space, and `\boxed{\text{` with 8,000 spaces held the event loop for a minute.
 */
function stripText(text: string): string {
  let inner = text;
  while (inner.startsWith('\\text{') && inner.endsWith('}') && inner.length > '\\text{'.length)
    inner = inner.slice('\\text{'.length, -1).trim();
  return inner;
}

/** Lower case, runs of white space as one space, trimmed: how option texts are compared. */
function normalized(text: string): string {
  return text.toLowerCase().split(/\s+/).filter(Boolean).join(' ');
}

/**
 * The capital letter in the last `\boxed{}`: alone (`B`, `(B)`, `\text{B}`) or leading a label
 * (`B: Queue`, `B) Queue`); lower case is no answer.
 */
export function extractBoxedChoice(
  text: string,
  letters: readonly string[] = DEFAULT_LETTERS,
): string | null {
  const boxed = lastBoxed(text);
  if (boxed === null) return null;
  const inner = stripText(boxed.trim());
  const letter = (/^[^A-Za-z]*([A-Z])[^A-Za-z]*$/.exec(inner) ?? /^\s*([A-Z])\s*[:).-]/.exec(inner))?.[1];
  return letter !== undefined && letters.includes(letter) ? letter : null;
}

/** `lenient_boxed`: the letter of the one option whose text the last `\boxed{}` contains. */
function boxedOptionText(text: string, options: Array<[string, string | null]>): string | null {
  const boxed = lastBoxed(text);
  if (boxed === null) return null;
  const candidates = [boxed.trim(), stripText(boxed.trim())].map(normalized);
  const matched = new Set(
    options.flatMap(([letter, option]) => {
      const wanted = option === null ? '' : normalized(option);
      return wanted !== '' && candidates.some((candidate) => candidate.includes(wanted)) ? [letter] : [];
    }),
  );
  return matched.size === 1 ? [...matched][0]! : null;
}

/** The letter of the option whose text is `text` (compared normalized). */
function optionWithText(text: string, options: Array<[string, string | null]>): string | null {
  const wanted = normalized(text);
  return options.find(([, option]) => option !== null && normalized(option) === wanted)?.[0] ?? null;
}

/** `lenient_answer_colon`: what follows the first `Answer:` on its line, a letter or an option's text. */
function answerColon(text: string, letters: readonly string[], options: Array<[string, string | null]>) {
  const match = /answer\s*:\s*(.+)/i.exec(text);
  if (match === null) return null;
  const candidate = stripText(match[1]!).trim();
  if (candidate.length === 1 && letters.includes(candidate.toUpperCase())) return candidate.toUpperCase();
  return optionWithText(candidate, options);
}

/** Letters of other scripts that NeMo Gym reads as A-D (Arabic, Bengali, full width). */
const FOREIGN_LETTERS: Record<string, string> = {
  أ: 'A',
  ب: 'B',
  ج: 'C',
  د: 'D',
  অ: 'A',
  ব: 'B',
  ড: 'C',
  ঢ: 'D',
  Ａ: 'A',
  Ｂ: 'B',
  Ｃ: 'C',
  Ｄ: 'D',
};

/** Compiles a row's `output_regex` as NeMo Gym applies it (case-insensitive, every match); throws when invalid. */
export function compileOutputRegex(pattern: string): RegExp {
  return new RegExp(pattern, 'gi');
}

/** The row's `output_regex` could not be run to its end on this answer (time limit, backtrack stack). */
export class OutputRegexOverrun extends Error {}

/**
 * One `output_regex`: its last match (its first group, else the whole match), a letter taken as
 * given (NeMo Gym trusts the template's regex, listed option or not), else an option's text.
 */
async function outputRegexChoice(
  text: string,
  pattern: string,
  options: Array<[string, string | null]>,
  runner: BoundedRegexRunner,
): Promise<string | null> {
  // Compiled here first: a pattern that does not compile fails as it always did (a row fault).
  const { source, flags } = compileOutputRegex(pattern);
  const last = await runner.lastMatch(source, flags, text);
  if (last.outcome === 'overrun') throw new OutputRegexOverrun(last.reason);
  if (last.value === null) return null;
  const captured = [...last.value]
    .map((character) => (character in FOREIGN_LETTERS ? ` ${FOREIGN_LETTERS[character]}` : character))
    .join('')
    .trim()
    .toUpperCase();
  if (/^[A-Z]$/.test(captured)) return captured;
  return optionWithText(captured, options);
}

/**
 * How the verifier reads a letter out of `text` under `grading` (null: no answer). Rejects with
 * {@link OutputRegexOverrun} when the row's `output_regex` cannot be run to its end on `text`.
 */
export async function extractAnswer(
  text: string,
  grading: ChoiceGrading = {},
  runner: BoundedRegexRunner = sharedRegexRunner,
): Promise<string | null> {
  const options = optionEntries(grading.options);
  const letters = optionLetters(grading.options) ?? DEFAULT_LETTERS;
  if (text.trim() === '') return null;
  const patterns = grading.outputRegex === undefined ? [] : [grading.outputRegex].flat();
  for (const pattern of patterns) {
    const choice = await outputRegexChoice(text, pattern, options, runner);
    if (choice !== null) return choice;
  }
  const mode = grading.gradingMode ?? DEFAULT_GRADING_MODE;
  if (mode === 'lenient_answer_colon') return answerColon(text, letters, options);
  const boxed = extractBoxedChoice(text, letters);
  if (boxed !== null || mode === 'strict_single_letter_boxed') return boxed;
  return boxedOptionText(text, options);
}

/** A submission the row's grading takes as `letter` (what the oracle answers). */
export function answerFor(letter: string, grading: ChoiceGrading = {}): string {
  return (grading.gradingMode ?? DEFAULT_GRADING_MODE) === 'lenient_answer_colon'
    ? `Answer: ${letter}`
    : `\\boxed{${letter}}`;
}

/** Whether `expected` is an option letter (graded by extraction) rather than a whole string. */
export function isLetterAnswer(expected: string): boolean {
  return /^[A-Za-z]$/.test(expected.trim());
}

/**
 * The reward of `submission`. An answer on which the row's `output_regex` runs past its limit is
 * graded 0 with a `reason`, not sent to the failures file: the answer is the model's and the regex
 * is the dataset's, so that is an answer the dataset cannot read, as a reply with no letter is (and
 * were it no reward, a policy could learn to dodge negative rewards by writing such answers). A
 * fault of the grading machinery itself (the worker does not start) throws: an infrastructure error.
 */
export async function verifyExact(
  submission: string | null,
  expected: string,
  grading: ChoiceGrading = {},
  runner: BoundedRegexRunner = sharedRegexRunner,
): Promise<Verdict> {
  const isChoice = isLetterAnswer(expected);
  const wanted = isChoice ? expected.trim().toUpperCase() : expected.trim();
  const mode = isChoice ? { grading_mode: grading.gradingMode ?? DEFAULT_GRADING_MODE } : {};
  let extracted: string | null;
  try {
    extracted =
      submission === null
        ? null
        : isChoice
          ? await extractAnswer(submission, grading, runner)
          : submission.trim();
  } catch (error) {
    if (!(error instanceof OutputRegexOverrun)) throw error;
    return {
      outcome: 'reward',
      reward: 0,
      details: {
        expected_answer: wanted,
        extracted_answer: null,
        ...mode,
        reason: `template_metadata.output_regex could not read this answer: ${error.message}`,
      },
      fields: { expected_answer: wanted, extracted_answer: null },
    };
  }
  return {
    outcome: 'reward',
    reward: extracted === wanted ? 1 : 0,
    details: { expected_answer: wanted, extracted_answer: extracted, ...mode },
    // NeMo Gym's mcqa server writes these two at the top level of the rollout line.
    fields: { expected_answer: wanted, extracted_answer: extracted },
  };
}
