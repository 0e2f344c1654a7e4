/**
 * The `script` kind (Terminal-Bench style): an instruction, a starting state made by the row's
 * `setup`, and a tests folder whose test.sh writes a reward; graded in the agent's own sandbox
 * after it finishes (environments/verifiers/script.ts).
 */
import { join } from 'node:path';
import { z } from 'zod';
import { verifyScript } from '../../verifiers/script.ts';
import { folderPath, hasPrompt, nonEmpty, sandboxPath } from '../fields.ts';
import { type EnvironmentKind, rowInstruction } from '../kind.ts';

export const ScriptRowSchema = z
  .looseObject({
    id: nonEmpty,
    image: nonEmpty,
    tests: folderPath,
    workdir: sandboxPath.optional(),
    setup: z.string().optional(),
    solution: z.string().optional(),
    verifier_timeout_sec: z
      .number()
      .positive()
      .max(24 * 3600)
      .optional(),
  })
  .refine(hasPrompt, { message: 'needs an instruction (or problem_statement)', path: ['instruction'] });

export const kind: EnvironmentKind = {
  name: 'script',
  rowSchema: ScriptRowSchema,
  image: (row) => String(row.image),
  task: (row, _environment, options) => ({
    id: String(row.id),
    instruction: rowInstruction(row),
    workdir: String(row.workdir ?? '/testbed'),
    // test.sh judges the final state; the workdir need not be a git repository.
    graded: 'state',
    ...(options.usesGoldPatch && typeof row.solution === 'string' ? { solution: row.solution } : {}),
  }),
  verify: ({ row, environment, sandbox }) =>
    verifyScript(
      sandbox,
      join(environment.directory, String(row.tests)),
      Number(row.verifier_timeout_sec ?? 300) * 1000,
    ),
  // The final state is gone with the sandbox: a script rollout keeps its reward.
};
