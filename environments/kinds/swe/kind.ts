/**
 * The `swe` kind: a repository at a base commit, a problem statement, and hidden tests. The
 * agent's final state becomes a patch, graded in a fresh sandbox from the task image
 * (environments/verifiers/swe.ts), as SWE-bench grades.
 */
import { z } from 'zod';
import { storedPatch } from '../../runner/rollout-line.ts';
import { extractPatch, sweTaskFromRow, verifySwe } from '../../verifiers/swe.ts';
import { nonEmpty, sandboxPath, testNames } from '../fields.ts';
import { type EnvironmentKind, rowInstruction } from '../kind.ts';

export const SweRowSchema = z.looseObject({
  instance_id: nonEmpty,
  image: nonEmpty,
  base_commit: nonEmpty,
  problem_statement: nonEmpty,
  test_command: nonEmpty,
  test_patch: z.string().optional(),
  FAIL_TO_PASS: testNames,
  PASS_TO_PASS: testNames.optional(),
  workdir: sandboxPath.optional(),
  patch: z.string().optional(),
  setup: z.string().optional(),
});

export const kind: EnvironmentKind = {
  name: 'swe',
  rowSchema: SweRowSchema,
  image: (row) => String(row.image),
  task: (row, _environment, options) => ({
    id: String(row.instance_id),
    instruction: rowInstruction(row),
    workdir: String(row.workdir ?? '/testbed'),
    ...(options.usesGoldPatch && typeof row.patch === 'string' ? { goldPatch: row.patch } : {}),
  }),
  async verify({ client, row, sandbox, releaseSandbox }) {
    const task = sweTaskFromRow(row);
    // Limits reached (steps, time, cost) still leave a final state worth grading, as SWE-bench
    // does. A patch that cannot be read (the agent broke its repo or its git) is its verdict.
    const extracted = await extractPatch(sandbox, task);
    await releaseSandbox();
    if ('verdict' in extracted) return extracted.verdict;
    const verdict = await verifySwe(client, task, extracted.patch);
    verdict.details.modelPatch = extracted.patch;
    return verdict;
  },
  // The swe-mini image set: the images of the run's rows (each row names its own), built from
  // the tasks' files. A build that fails is said and the run goes on with what exists.
  async prepareImages({ client, environment, rows, onStart, onImage, onNotice }) {
    const { buildSweMiniImages, SWE_MINI_IMAGE_SET } = await import('../../swe-mini/images.ts');
    if (environment.images !== SWE_MINI_IMAGE_SET) return;
    const wanted = new Set(rows.flatMap((row) => (typeof row.image === 'string' ? [row.image] : [])));
    await buildSweMiniImages(client, onImage, wanted.size > 0 ? wanted : undefined, onStart).catch(
      (error: unknown) => onNotice?.(`could not build the task images (${String(error)}); using what exists`),
    );
  },
  async reverify(client, _environment, row) {
    const patch = storedPatch(row);
    if (patch === null) return null;
    const verdict = await verifySwe(client, sweTaskFromRow(row), patch);
    verdict.details.modelPatch = patch;
    return verdict;
  },
};
