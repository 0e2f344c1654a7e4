/**
 * A SWE-bench row exactly as the datasets publish it (`instance_id`, `repo`, `base_commit`,
 * `patch`, `test_patch`, `FAIL_TO_PASS` / `PASS_TO_PASS` as JSON-encoded lists, `version`, ...,
 * and no image), checked field by field so a bad row is an error that names the field; and the
 * image a row runs in, named as SWE-bench names its images or by a template.
 */
import { z } from 'zod';
import { GymError } from '../../../core/errors.ts';

/** A JSON-encoded list of test ids, as published; a plain list is taken too. */
const testIds = z.union([z.array(z.string()), z.string()]).transform((value, context) => {
  if (Array.isArray(value)) return value;
  let parsed: unknown;
  try {
    parsed = JSON.parse(value);
  } catch {
    context.addIssue({ code: 'custom', message: 'must be a JSON-encoded list of test ids' });
    return z.NEVER;
  }
  if (!Array.isArray(parsed) || !parsed.every((id) => typeof id === 'string')) {
    context.addIssue({ code: 'custom', message: 'must be a JSON-encoded list of strings (test ids)' });
    return z.NEVER;
  }
  return parsed as string[];
});

/**
 * The SWE-bench fields of a row, as NeMo Gym's `swe_agents` agent reads them when the row keeps
 * them under `responses_create_params.metadata` (its `instance_dict`, the whole instance JSON-encoded,
 * and `instance_id`, `base_commit`, `problem_statement`, `golden_patch` beside it): each fills only
 * a field the row's top level lacks, so a published row reads as it always did.
 */
export function withInstanceFields(row: unknown): unknown {
  if (typeof row !== 'object' || row === null) return row;
  const record = row as Record<string, unknown>;
  const params = record.responses_create_params as { metadata?: unknown } | undefined;
  const metadata = params?.metadata;
  if (typeof metadata !== 'object' || metadata === null) return row;
  const fields = metadata as Record<string, unknown>;
  let instance: Record<string, unknown> = {};
  if (typeof fields.instance_dict === 'string') {
    try {
      const decoded: unknown = JSON.parse(fields.instance_dict);
      if (typeof decoded === 'object' && decoded !== null && !Array.isArray(decoded))
        instance = decoded as Record<string, unknown>;
    } catch {
      // Not JSON: the row's own fields are checked as they are and name what is missing.
    }
  } else if (typeof fields.instance_dict === 'object' && fields.instance_dict !== null)
    instance = fields.instance_dict as Record<string, unknown>;
  const fromMetadata = {
    ...instance,
    ...Object.fromEntries(
      ['instance_id', 'base_commit', 'problem_statement', 'repo', 'version'].flatMap((key) =>
        fields[key] === undefined ? [] : [[key, fields[key]]],
      ),
    ),
    ...(fields.golden_patch === undefined ? {} : { patch: fields.golden_patch }),
  };
  const merged: Record<string, unknown> = { ...record };
  for (const [key, value] of Object.entries(fromMetadata))
    if (merged[key] === undefined && value !== undefined && value !== null) merged[key] = value;
  return merged;
}

const SweBenchFieldsSchema = z.looseObject({
  instance_id: z.string().regex(/^[A-Za-z0-9._-]+$/, 'must be letters, digits, ".", "_" or "-"'),
  repo: z.string().regex(/^[A-Za-z0-9._-]+\/[A-Za-z0-9._-]+$/, 'must be "owner/name"'),
  base_commit: z.string().regex(/^[0-9a-f]{7,40}$/, 'must be a git commit id (hex)'),
  // The gold patch: the oracle's answer. Optional: a row to grade predictions needs none.
  patch: z.string().optional(),
  test_patch: z.string().regex(/^diff --git /m, 'must be a git diff (no "diff --git" header found)'),
  FAIL_TO_PASS: testIds,
  PASS_TO_PASS: testIds,
  // Some exports write versions as numbers (3.0 -> 3): only a string keeps "3.0" apart from "3".
  version: z
    .string({ error: 'must be a string such as "3.0" (a number loses the difference between 3.0 and 3)' })
    .min(1),
  problem_statement: z.string().default(''),
  environment_setup_commit: z.string().optional(),
  hints_text: z.string().optional(),
  created_at: z.string().optional(),
  /** Not a published field: an image for this row that wins over the template. */
  image: z.string().min(1).optional(),
  workdir: z.string().startsWith('/').optional(),
});
export const SweBenchRowSchema = z.preprocess(withInstanceFields, SweBenchFieldsSchema);
export type SweBenchRow = z.output<typeof SweBenchFieldsSchema>;

/** Whether a row looks like SWE-bench's (for telling the input format without `--env`). */
export function looksLikeSweBench(row: Record<string, unknown>): boolean {
  const merged = withInstanceFields(row) as Record<string, unknown>;
  return ['instance_id', 'repo', 'base_commit', 'test_patch', 'FAIL_TO_PASS'].every((key) => key in merged);
}

/** The workdir SWE-bench's images keep the repository in. */
export const SWE_BENCH_WORKDIR = '/testbed';

/**
 * SWE-bench's local image name (`sweb.eval.<arch>.<instance id, lower case>:latest`, what its
 * harness builds); `{instance_id_1776}` gives the published hub name's form, where `__` becomes
 * `_1776_` (`swebench/sweb.eval.x86_64.{instance_id_1776}:latest`).
 */
export const DEFAULT_IMAGE_TEMPLATE = 'sweb.eval.{arch}.{instance_id_lower}:latest';

/** The machine's architecture as SWE-bench spells it in image names. */
export function sweBenchArch(arch: string = process.arch): string {
  return arch === 'arm64' ? 'arm64' : 'x86_64';
}

const PLACEHOLDERS = [
  'instance_id',
  'instance_id_lower',
  'instance_id_1776',
  'repo',
  'repo_owner',
  'repo_name',
  'version',
  'arch',
  'base_commit',
] as const;

/** Checks a template's placeholders at once, so a typo fails before any sandbox starts. */
export function checkImageTemplate(template: string): void {
  for (const match of template.matchAll(/\{([^}]*)\}/g)) {
    if (!(PLACEHOLDERS as readonly string[]).includes(match[1]!))
      throw new GymError(
        'VALIDATION_FAILED',
        `image template "${template}": unknown placeholder {${match[1]}}; known: ${PLACEHOLDERS.map((name) => `{${name}}`).join(', ')}`,
      );
  }
}

/** The image a row runs in: its own `image`, else the template filled in. */
export function sweBenchImage(
  row: Pick<SweBenchRow, 'instance_id' | 'repo' | 'version' | 'image' | 'base_commit'>,
  template: string = DEFAULT_IMAGE_TEMPLATE,
  arch: string = sweBenchArch(),
): string {
  if (row.image !== undefined) return row.image;
  checkImageTemplate(template);
  const [owner = '', name = ''] = row.repo.split('/');
  const values: Record<(typeof PLACEHOLDERS)[number], string> = {
    instance_id: row.instance_id,
    instance_id_lower: row.instance_id.toLowerCase(),
    instance_id_1776: row.instance_id.toLowerCase().replaceAll('__', '_1776_'),
    repo: row.repo,
    repo_owner: owner,
    repo_name: name,
    version: row.version,
    arch,
    base_commit: row.base_commit,
  };
  return template.replace(/\{([^}]*)\}/g, (_, key: string) => values[key as keyof typeof values]);
}

/** Said when a row's image is missing: images are never pulled, so say how to get one. */
export function missingImageHint(image: string, instanceId: string): string {
  return (
    `image "${image}" for ${instanceId} is not on the engine, and images are never pulled: build it ` +
    `with SWE-bench's harness (prepare_images for that instance id), or \`docker load\` a saved one, ` +
    'or point --image-template (placeholders {instance_id}, {instance_id_lower}, {instance_id_1776}, ' +
    '{repo}, {repo_owner}, {repo_name}, {version}, {arch}, {base_commit}) at the names your images have'
  );
}
