/**
 * The `exact` kind: a question and its expected answer, no sandbox. The submission must match
 * (the chosen option letter, read as NeMo Gym's MCQA server reads it, or the whole string).
 */
import { z } from 'zod';
import { highestKMetrics, passMajorityMetrics } from '../../runner/metrics.ts';
import { storedOutputText } from '../../runner/rollout-line.ts';
import {
  answerFor,
  type ChoiceGrading,
  compileOutputRegex,
  GRADING_MODES,
  isLetterAnswer,
  verifyExact,
} from '../../verifiers/exact.ts';
import { hasPrompt, nonEmpty } from '../fields.ts';
import { type EnvironmentKind, rowInstruction } from '../kind.ts';

/** A regular expression this verifier can compile (NeMo Gym's are Python's; most read the same). */
const outputRegex = z.string().refine(
  (pattern) => {
    try {
      compileOutputRegex(pattern);
      return true;
    } catch {
      return false;
    }
  },
  { message: 'must be a regular expression this verifier can compile' },
);

export const ExactRowSchema = z
  .looseObject({
    id: z.union([nonEmpty, z.number()]).optional(),
    expected_answer: nonEmpty,
    // An unknown mode or a regex that does not compile was once a silent fall back to another reading.
    grading_mode: z.enum(GRADING_MODES).optional(),
    template_metadata: z
      .looseObject({ output_regex: z.union([outputRegex, z.array(outputRegex).min(1)]).optional() })
      .optional(),
  })
  .refine(hasPrompt, {
    message: 'needs a question, an instruction or responses_create_params.input',
    path: ['instruction'],
  });

/**
 * The options a prompt lists, one a line (`A: Karyotyping`, `B) PCR`), when it lists at least two
 * from A in order; else undefined.
 */
export function promptOptions(row: Record<string, unknown>): Array<Record<string, string>> | undefined {
  const options: Array<Record<string, string>> = [];
  for (const line of rowInstruction(row).split('\n')) {
    const match = /^\s*([A-Z])\s*[:.)]\s*(\S.*)$/.exec(line);
    if (match === null) continue;
    const letter = match[1]!;
    // Only the next letter continues the list: a stray "I: ..." line in the question is no option.
    if (letter.charCodeAt(0) !== 'A'.charCodeAt(0) + options.length) continue;
    options.push({ [letter]: match[2]!.trim() });
  }
  return options.length >= 2 ? options : undefined;
}

/**
 * The row's options, NeMo Gym grading mode and template regex, when it gives them. A stored
 * rollout line without the row's options (NeMo Gym's own example rollouts keep only the prompt)
 * is graded on the options its prompt lists, the ones the row had.
 */
function grading(row: Record<string, unknown>, fromPrompt = false): ChoiceGrading {
  const template = row.template_metadata as { output_regex?: string | string[] } | undefined;
  const options = row.options ?? (fromPrompt ? promptOptions(row) : undefined);
  return {
    ...(options === undefined ? {} : { options }),
    ...(typeof row.grading_mode === 'string'
      ? { gradingMode: row.grading_mode as ChoiceGrading['gradingMode'] }
      : {}),
    ...(template?.output_regex === undefined ? {} : { outputRegex: template.output_regex }),
  };
}

export const kind: EnvironmentKind = {
  name: 'exact',
  rowSchema: ExactRowSchema,
  image: () => null,
  task: (row, _environment, options) => {
    const expected = String(row.expected_answer);
    return {
      id: String(row.id ?? row.instance_id ?? row.uuid ?? ''),
      instruction: rowInstruction(row),
      workdir: '/',
      // The oracle answers as the row's grading mode reads a letter (`\boxed{B}`, `Answer: B`).
      ...(options.usesGoldPatch
        ? {
            goldAnswer: isLetterAnswer(expected)
              ? answerFor(expected.trim().toUpperCase(), grading(row))
              : expected,
          }
        : {}),
    };
  },
  verify: async ({ row, harnessResult }) =>
    verifyExact(harnessResult.submission ?? null, String(row.expected_answer), grading(row)),
  // NeMo Gym's mcqa server's metrics: accuracy (the reward), majority vote and no-answer rate
  // over extracted_answer, and its headline ones.
  computeMetrics: (tasks) =>
    passMajorityMetrics(tasks, (line) => ({ accuracy: Number(line.reward) }), 'extracted_answer'),
  keyMetrics: (metrics) => ({
    ...(metrics['mean/reward'] === undefined ? {} : { 'mean/reward': metrics['mean/reward'] }),
    ...highestKMetrics(metrics, 'pass@1[avg-of-{k}]', ['accuracy', 'no_answer']),
    ...highestKMetrics(metrics, 'pass@{k}', ['no_answer']),
    ...highestKMetrics(metrics, 'majority@{k}', ['accuracy']),
    ...(metrics['pass@1/accuracy'] === undefined ? {} : { 'pass@1/accuracy': metrics['pass@1/accuracy'] }),
  }),
  // The stored answer is the line's Responses output text, as NeMo Gym's mcqa server reads it.
  reverify: async (_client, _environment, row) =>
    verifyExact(storedOutputText(row), String(row.expected_answer ?? ''), grading(row, true)),
};
