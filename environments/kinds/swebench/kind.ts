/**
 * The `swebench` kind: SWE-bench rows exactly as published (no image, no test command, the test
 * lists JSON-encoded), run in SWE-bench's images and graded as SWE-bench grades, with its
 * `report.json` written beside the run's files.
 *
 * Environment options (`options` in environment.json; `--image-template` on the command line):
 * - `imageTemplate`: how a row's image is named (row.ts; default SWE-bench's local names).
 * - `repositories`: `{ "owner/name": { testCommand, logParser, evalCommands? } }` for
 *   repositories SWE-bench's table lacks, or to override it.
 * - `testTimeoutSec`: how long the evaluation may run (default 900).
 */
import { z } from 'zod';
import { GymError } from '../../../core/errors.ts';
import { parseOrThrow } from '../../../core/validate.ts';
import type { LoadedEnvironment } from '../../environment.ts';
import { storedPatch } from '../../runner/rollout-line.ts';
import { extractPatch } from '../../verifiers/swe.ts';
import type { Verdict } from '../../verifiers/verifier.ts';
import type { EnvironmentKind, TaskRow } from '../kind.ts';
import { LOG_PARSERS } from './log-parsers.ts';
import { writeSweBenchReports } from './report-files.ts';
import { type RepositorySpec, repositorySpec } from './repositories.ts';
import {
  checkImageTemplate,
  DEFAULT_IMAGE_TEMPLATE,
  missingImageHint,
  SWE_BENCH_WORKDIR,
  type SweBenchRow,
  SweBenchRowSchema,
  sweBenchImage,
} from './row.ts';
import { DEFAULT_TEST_TIMEOUT_SEC, gradeSweBench } from './verify.ts';

const parserName = z.enum(Object.keys(LOG_PARSERS) as [string, ...string[]]);

export const SweBenchOptionsSchema = z
  .object({
    imageTemplate: z
      .string()
      .min(1)
      .default(DEFAULT_IMAGE_TEMPLATE)
      .superRefine((template, context) => {
        try {
          checkImageTemplate(template);
        } catch (error) {
          context.addIssue({ code: 'custom', message: (error as Error).message });
        }
      }),
    repositories: z
      .record(
        z.string(),
        z.object({
          testCommand: z.string().min(1),
          logParser: parserName,
          evalCommands: z.array(z.string()).optional(),
        }),
      )
      .default({}),
    testTimeoutSec: z.number().int().positive().default(DEFAULT_TEST_TIMEOUT_SEC),
  })
  .loose();
export type SweBenchOptions = z.output<typeof SweBenchOptionsSchema>;

export function sweBenchOptions(environment: Pick<LoadedEnvironment, 'options' | 'name'>): SweBenchOptions {
  return parseOrThrow(
    SweBenchOptionsSchema,
    environment.options ?? {},
    `options of environment ${environment.name}`,
  );
}

const parse = (row: TaskRow): SweBenchRow => SweBenchRowSchema.parse(row);

function specFor(row: SweBenchRow, options: SweBenchOptions): RepositorySpec {
  const spec = repositorySpec(row.repo, row.version, options.repositories as Record<string, RepositorySpec>);
  if (spec === undefined)
    throw new GymError(
      'VALIDATION_FAILED',
      `${row.instance_id}: SWE-bench has no test command for repo "${row.repo}"; describe it in the environment's options.repositories ({ testCommand, logParser })`,
    );
  return spec;
}

/**
 * The verdict with the patch in its details and the top-level fields NeMo Gym's swebench server
 * writes: `resolved`, `evaluation_completed` (SWE-bench's harness wrote its report), `instance_id`,
 * `model_patch`, `patch_verification_time_taken` (seconds). Its `eval_sandbox_start_time_taken`,
 * `test_output` and `log_dir` are not written: the details hold the log tail, and no log folder is kept.
 */
function withNemoGymFields(verdict: Verdict, row: SweBenchRow, patch: string, startedMs: number): Verdict {
  verdict.details.modelPatch = patch;
  if (verdict.outcome !== 'reward') return verdict;
  return {
    ...verdict,
    fields: {
      evaluation_completed: verdict.details.report !== undefined,
      resolved: verdict.reward === 1,
      patch_verification_time_taken: (Date.now() - startedMs) / 1000,
      instance_id: row.instance_id,
      model_patch: patch,
    },
  };
}

export const kind: EnvironmentKind = {
  name: 'swebench',
  rowSchema: SweBenchRowSchema,
  // Before any sandbox starts: a repository neither SWE-bench nor the options describe.
  checkRow: (row, environment) => {
    specFor(parse(row), sweBenchOptions(environment));
  },
  image: (row, environment) => sweBenchImage(parse(row), sweBenchOptions(environment).imageTemplate),
  task: (row, _environment, options) => {
    const parsed = parse(row);
    return {
      id: parsed.instance_id,
      instruction: parsed.problem_statement,
      workdir: parsed.workdir ?? SWE_BENCH_WORKDIR,
      ...(options.usesGoldPatch && parsed.patch !== undefined ? { goldPatch: parsed.patch } : {}),
    };
  },
  async verify({ client, environment, row, sandbox, releaseSandbox }) {
    const parsed = parse(row);
    const options = sweBenchOptions(environment);
    const spec = specFor(parsed, options);
    const extracted = await extractPatch(sandbox, {
      workdir: parsed.workdir ?? SWE_BENCH_WORKDIR,
      base_commit: parsed.base_commit,
    });
    await releaseSandbox();
    if ('verdict' in extracted) return extracted.verdict;
    const image = sweBenchImage(parsed, options.imageTemplate);
    const started = Date.now();
    const verdict = await gradeSweBench(
      client,
      { row: parsed, image, spec, testTimeoutSec: options.testTimeoutSec },
      extracted.patch,
    );
    return withNemoGymFields(verdict, parsed, extracted.patch, started);
  },
  async reverify(client, environment, row) {
    const patch = storedPatch(row);
    if (patch === null) return null;
    const parsed = parse(row);
    const options = sweBenchOptions(environment);
    const started = Date.now();
    const verdict = await gradeSweBench(
      client,
      {
        row: parsed,
        image: sweBenchImage(parsed, options.imageTemplate),
        spec: specFor(parsed, options),
        testTimeoutSec: options.testTimeoutSec,
      },
      patch,
    );
    return withNemoGymFields(verdict, parsed, patch, started);
  },
  describeMissingImage: (image, row) => missingImageHint(image, String(row.instance_id)),
  writeReports: writeSweBenchReports,
};
