/**
 * The exact verifier: the chosen option letter (or a whole string) must equal the expected answer.
 * Options may be more than A-D (NeMo Gym's MCQA rows list `options` as `[{"A": ...}, ...]`, up to
 * J and beyond), and the letter may be given in `\boxed{}`; NeMo Gym's default grading mode,
 * `strict_single_letter_boxed`, takes only the last `\boxed{}`.
 */
import type { Verdict } from './verifier.ts';

const DEFAULT_LETTERS = ['A', 'B', 'C', 'D'];

export interface ChoiceGrading {
  /** The option letters of the question (default A-D). */
  letters?: readonly string[];
  /** NeMo Gym's `grading_mode`: `strict_single_letter_boxed` reads only `\boxed{}`. */
  gradingMode?: string;
}

/** The option letters of a row's `options`: a list of one-key objects, or an object. */
export function optionLetters(options: unknown): string[] | undefined {
  const keys = Array.isArray(options)
    ? options.flatMap((option) => (typeof option === 'object' && option !== null ? Object.keys(option) : []))
    : typeof options === 'object' && options !== null
      ? Object.keys(options)
      : [];
  const letters = keys.map((key) => key.trim().toUpperCase()).filter((key) => /^[A-Z]$/.test(key));
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

/** The letter in the last `\boxed{}`: alone (`B`, `(B)`, `\text{B}`) or leading a label (`B: Queue`). */
export function extractBoxedChoice(
  text: string,
  letters: readonly string[] = DEFAULT_LETTERS,
): string | null {
  let inner = lastBoxed(text);
  if (inner === null) return null;
  for (let wrapped = /^\s*\\text\{([\s\S]*)\}\s*$/.exec(inner); wrapped !== null; ) {
    inner = wrapped[1]!;
    wrapped = /^\s*\\text\{([\s\S]*)\}\s*$/.exec(inner);
  }
  const letter = (/^[^A-Za-z]*([A-Za-z])[^A-Za-z]*$/.exec(inner) ??
    /^\s*([A-Za-z])\s*[:).]/.exec(inner))?.[1];
  const upper = letter?.toUpperCase();
  return upper !== undefined && letters.includes(upper) ? upper : null;
}

/** `\boxed{X}` wins, then `Answer: X`, else the last standalone option letter. Null when there is none. */
export function extractChoice(text: string, letters: readonly string[] = DEFAULT_LETTERS): string | null {
  const boxed = extractBoxedChoice(text, letters);
  if (boxed !== null) return boxed;
  const explicit = /answer\s*[:=]\s*\(?([A-Z])\b/i.exec(text);
  if (explicit && letters.includes(explicit[1]!.toUpperCase())) return explicit[1]!.toUpperCase();
  const standalone = [...text.matchAll(/\b([A-Z])\b/g)].filter((match) => letters.includes(match[1]!));
  return standalone.length === 0 ? null : standalone.at(-1)![1]!;
}

export function verifyExact(
  submission: string | null,
  expected: string,
  grading: ChoiceGrading = {},
): Verdict {
  const letters = grading.letters ?? DEFAULT_LETTERS;
  const isChoice = letters.includes(expected);
  const extract = (text: string) =>
    grading.gradingMode === 'strict_single_letter_boxed'
      ? extractBoxedChoice(text, letters)
      : extractChoice(text, letters);
  const extracted = submission === null ? null : isChoice ? extract(submission) : submission.trim();
  return {
    outcome: 'reward',
    reward: extracted === expected ? 1 : 0,
    details: {
      expected_answer: expected,
      extracted_answer: extracted,
      ...(grading.gradingMode === undefined ? {} : { grading_mode: grading.gradingMode }),
    },
  };
}
