/**
 * The `exact` kind: a question and its expected answer, no sandbox. The submission must match
 * (the chosen option letter, or the whole string).
 */
import { z } from 'zod';
import { type ChoiceGrading, optionLetters, verifyExact } from '../../verifiers/exact.ts';
import { hasPrompt, nonEmpty } from '../fields.ts';
import { type EnvironmentKind, rowInstruction } from '../kind.ts';

export const ExactRowSchema = z
  .looseObject({ id: z.union([nonEmpty, z.number()]).optional(), expected_answer: nonEmpty })
  .refine(hasPrompt, {
    message: 'needs a question, an instruction or responses_create_params.input',
    path: ['instruction'],
  });

/** The row's option letters and NeMo Gym grading mode, when it gives them. */
function grading(row: Record<string, unknown>): ChoiceGrading {
  const letters = optionLetters(row.options);
  return {
    ...(letters === undefined ? {} : { letters }),
    ...(typeof row.grading_mode === 'string' ? { gradingMode: row.grading_mode } : {}),
  };
}

export const kind: EnvironmentKind = {
  name: 'exact',
  rowSchema: ExactRowSchema,
  image: () => null,
  task: (row, _environment, options) => ({
    id: String(row.id ?? row.instance_id ?? row.uuid ?? ''),
    instruction: rowInstruction(row),
    workdir: '/',
    ...(options.usesGoldPatch ? { goldAnswer: String(row.expected_answer) } : {}),
  }),
  verify: async ({ row, harnessResult }) =>
    verifyExact(harnessResult.submission ?? null, String(row.expected_answer), grading(row)),
  async reverify(_client, _environment, row) {
    const response = (row.response ?? {}) as Record<string, unknown>;
    return verifyExact(
      typeof response.submission === 'string' ? response.submission : null,
      String(row.expected_answer ?? ''),
      grading(row),
    );
  },
};
