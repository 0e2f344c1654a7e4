/** The exact verifier: the chosen option letter (or a whole string) must equal the expected answer. */
import type { Verdict } from './verifier.ts';

/** `Answer: X` wins; else the last standalone capital A-D. Null when there is none. */
export function extractChoice(text: string): string | null {
  const explicit = /answer\s*[:=]\s*\(?([A-D])\b/i.exec(text);
  if (explicit) return explicit[1]!.toUpperCase();
  const letters = [...text.matchAll(/\b([A-D])\b/g)];
  return letters.length === 0 ? null : letters.at(-1)![1]!;
}

export function verifyExact(submission: string | null, expected: string): Verdict {
  const isChoice = /^[A-D]$/.test(expected);
  const extracted = submission === null ? null : isChoice ? extractChoice(submission) : submission.trim();
  return {
    outcome: 'reward',
    reward: extracted === expected ? 1 : 0,
    details: { expected_answer: expected, extracted_answer: extracted },
  };
}
