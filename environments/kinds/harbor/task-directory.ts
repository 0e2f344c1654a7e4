/**
 * Harbor task directories as task rows: `task.toml` (timeouts, env, resources), `instruction.md`
 * (what the agent is told), `environment/Dockerfile` (its image, built here without a registry),
 * `tests/test.sh` (copied in after the agent finishes) and `solution/solve.sh` (the oracle's).
 * A path is one task directory, or a folder of them (a Harbor dataset).
 *
 * Rows stay JSON (they are written to the materialized inputs and the rollouts), so a row names
 * its directory and keeps `${VAR}` in env values unresolved: secrets a verifier needs are read
 * from the environment when it runs (only those the operator allowed), never written to the results.
 */
import { createHash } from 'node:crypto';
import { access, lstat, readdir, readFile, readlink, realpath, stat } from 'node:fs/promises';
import { basename, dirname, join, relative, resolve, sep } from 'node:path';
import { parse as parseToml } from 'smol-toml';
import { z } from 'zod';
import { GymError } from '../../../core/errors.ts';
import { parseDockerfile, planDockerfile } from './dockerfile.ts';

/** Bump when what a task's image holds changes for the same inputs (the image tag includes it). */
export const HARBOR_IMAGE_RECIPE_VERSION = 1;
export const HARBOR_IMAGE_PREFIX = 'gym/harbor-';
/** How long building a task's image may take at most (task.toml's build_timeout_sec). */
export const MAX_BUILD_TIMEOUT_SEC = 3600;

const EnvTableSchema = z.record(z.string(), z.union([z.string(), z.number(), z.boolean()]).transform(String));
const Seconds = z
  .number()
  .positive()
  .max(7 * 24 * 3600);

/** The part of task.toml we use; other keys pass (Harbor adds them often). */
export const TaskTomlSchema = z.looseObject({
  task: z.looseObject({ name: z.string().min(1).optional() }).optional(),
  verifier: z
    .looseObject({
      timeout_sec: Seconds.default(600),
      env: EnvTableSchema.default({}),
      user: z.union([z.string(), z.number()]).transform(String).optional(),
      environment_mode: z
        .enum(['shared'], {
          message: 'only "shared" (the verifier runs in the agent\'s sandbox) is supported',
        })
        .optional(),
    })
    .default({ timeout_sec: 600, env: {} }),
  agent: z.looseObject({ timeout_sec: Seconds.optional() }).default({}),
  solution: z.looseObject({ env: EnvTableSchema.default({}) }).default({ env: {} }),
  environment: z
    .looseObject({
      build_timeout_sec: z
        .number()
        .positive()
        .max(MAX_BUILD_TIMEOUT_SEC, `must be at most ${MAX_BUILD_TIMEOUT_SEC} s (1 hour)`)
        .default(600),
      env: EnvTableSchema.default({}),
      docker_image: z.string().min(1).optional(),
      os: z.enum(['linux'], { message: 'only linux tasks run here' }).optional(),
      cpus: z.number().positive().optional(),
      memory_mb: z.number().int().positive().optional(),
      gpus: z.number().int().max(0, 'no GPUs here: a task that needs one cannot run').optional(),
    })
    .default({ build_timeout_sec: 600, env: {} }),
  steps: z.undefined({ message: 'multi-step tasks are not supported' }).optional(),
});

/** A Harbor task as a row of the `harbor` kind. */
export interface HarborRow {
  [key: string]: unknown;
  id: string;
  instruction: string;
  /** Absolute path of the task directory. */
  task_dir: string;
  /** The image the agent's sandbox runs: built from environment/Dockerfile, or task.toml's docker_image. */
  image: string;
  /** Whether `image` is built from environment/Dockerfile (else it must exist already). */
  build: boolean;
  /** The working directory of the image (its last WORKDIR), where the agent and test.sh start. */
  workdir: string;
  verifier_timeout_sec: number;
  agent_timeout_sec?: number;
  build_timeout_sec: number;
  /** task.toml's [environment] env (the sandbox's), [verifier] env and [solution] env, `${VAR}` unresolved. */
  environment_env: Record<string, string>;
  verifier_env: Record<string, string>;
  solution_env: Record<string, string>;
  verifier_user?: string;
  cpus?: number;
  memory_mb?: number;
}

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

/** Files below a directory, relative paths sorted, for the image's content hash. */
async function contextFiles(directory: string): Promise<string[]> {
  const entries = await readdir(directory, { withFileTypes: true, recursive: true });
  return entries
    .filter((entry) => entry.isFile() || entry.isSymbolicLink())
    .map((entry) => relative(directory, join(entry.parentPath, entry.name)))
    .sort();
}

/** The tag of a task's image: a hash of the Dockerfile and every file of its build context. */
async function imageTag(contextDirectory: string): Promise<string> {
  const hash = createHash('sha256');
  hash.update(`harbor-image-recipe-${HARBOR_IMAGE_RECIPE_VERSION}\n`);
  for (const path of await contextFiles(contextDirectory)) {
    const absolute = join(contextDirectory, path);
    const info = await lstat(absolute);
    hash.update(`${path}\0${info.mode & 0o777}\0`);
    // A link is built as a link (its target's text), never followed.
    hash.update(info.isSymbolicLink() ? `->${await readlink(absolute)}` : await readFile(absolute));
    hash.update('\0');
  }
  return hash.digest('hex').slice(0, 12);
}

/** A Docker repository name from a task name (`org/name` -> `org-name`), lower case. */
export function imageRepository(taskName: string): string {
  const slug = taskName
    .toLowerCase()
    .replace(/[^a-z0-9._-]+/g, '-')
    .replace(/^[._-]+|[._-]+$/g, '')
    .slice(0, 100);
  return `${HARBOR_IMAGE_PREFIX}${slug === '' ? 'task' : slug}`;
}

const inside = (folder: string, path: string) => path === folder || path.startsWith(folder + sep);

/**
 * Why the task's files would reach outside it, or undefined: its tests/, solution/ or environment/
 * being a symbolic link, or a link in environment/ pointing out of it (a COPY through such a link,
 * `COPY link/id_rsa /root/`, would put a host file into the image). Links in tests/ and solution/
 * are never followed (only regular files are copied).
 */
async function linkOutside(taskDir: string): Promise<string | undefined> {
  for (const folder of ['tests', 'solution', 'environment']) {
    const info = await lstat(join(taskDir, folder)).catch(() => undefined);
    if (info?.isSymbolicLink() === true)
      return `${folder}/ is a symbolic link (it must be a folder of the task)`;
  }
  const environment = join(taskDir, 'environment');
  if (!(await exists(environment))) return undefined;
  const real = await realpath(environment);
  for (const path of await contextFiles(environment)) {
    const absolute = join(environment, path);
    if (!(await lstat(absolute)).isSymbolicLink()) continue;
    const target = resolve(dirname(absolute), await readlink(absolute));
    const resolved = await realpath(absolute).catch(() => undefined);
    if (!inside(environment, target) || (resolved !== undefined && !inside(real, resolved)))
      return `environment/${path} is a symbolic link out of environment/ (a build could copy host files through it)`;
  }
  return undefined;
}

/** Reads one task directory; errors name the file and the field. */
export async function readHarborTask(directory: string): Promise<HarborRow> {
  const taskDir = resolve(directory);
  const where = (file: string) => join(taskDir, file);
  const fail = (message: string): never => {
    throw new GymError('VALIDATION_FAILED', `Harbor task ${taskDir}: ${message}`);
  };
  let toml: unknown;
  try {
    toml = parseToml(await readFile(where('task.toml'), 'utf8'));
  } catch (error) {
    fail(`task.toml cannot be read: ${(error as Error).message}`);
  }
  const parsed = TaskTomlSchema.safeParse(toml);
  if (!parsed.success)
    fail(
      `task.toml: ${parsed.error.issues.map((issue) => `${issue.path.join('.') || '(file)'}: ${issue.message}`).join('; ')}`,
    );
  const config = parsed.data!;
  const instruction = await readFile(where('instruction.md'), 'utf8').catch(() =>
    fail('instruction.md is missing'),
  );
  if (instruction.trim() === '') fail('instruction.md is empty');
  if (!(await exists(where('tests/test.sh')))) fail('tests/test.sh is missing');
  const outside = await linkOutside(taskDir);
  if (outside !== undefined) fail(outside);
  const id = config.task?.name ?? basename(taskDir);
  const dockerfile = where('environment/Dockerfile');
  const hasDockerfile = await exists(dockerfile);
  let image: string;
  let workdir = '/';
  if (config.environment.docker_image !== undefined) image = config.environment.docker_image;
  else if (hasDockerfile) image = `${imageRepository(id)}:${await imageTag(where('environment'))}`;
  else return fail('environment/Dockerfile is missing (and task.toml names no [environment] docker_image)');
  if (hasDockerfile && config.environment.docker_image === undefined) {
    const plan = planDockerfile(parseDockerfile(await readFile(dockerfile, 'utf8')));
    workdir = plan.settings.workdir;
  }
  return {
    id,
    instruction,
    task_dir: taskDir,
    image,
    build: config.environment.docker_image === undefined,
    workdir,
    verifier_timeout_sec: config.verifier.timeout_sec,
    ...(config.agent.timeout_sec === undefined ? {} : { agent_timeout_sec: config.agent.timeout_sec }),
    build_timeout_sec: config.environment.build_timeout_sec,
    environment_env: config.environment.env,
    verifier_env: config.verifier.env,
    solution_env: config.solution.env,
    ...(config.verifier.user === undefined ? {} : { verifier_user: config.verifier.user }),
    ...(config.environment.cpus === undefined ? {} : { cpus: config.environment.cpus }),
    ...(config.environment.memory_mb === undefined ? {} : { memory_mb: config.environment.memory_mb }),
  };
}

/** Whether a path is a Harbor task directory, or a folder holding some. */
export async function isHarborPath(path: string): Promise<boolean> {
  const info = await stat(path).catch(() => undefined);
  if (info?.isDirectory() !== true) return false;
  if (await exists(join(path, 'task.toml'))) return true;
  const entries = await readdir(path, { withFileTypes: true });
  for (const entry of entries)
    if (entry.isDirectory() && (await exists(join(path, entry.name, 'task.toml')))) return true;
  return false;
}

/** The rows of a task directory (one) or of a folder of them (each, by folder name). */
export async function readHarborTasks(path: string): Promise<HarborRow[]> {
  if (await exists(join(path, 'task.toml'))) return [await readHarborTask(path)];
  const entries = await readdir(path, { withFileTypes: true }).catch((error: Error) => {
    throw new GymError('VALIDATION_FAILED', `cannot read ${path}: ${error.message}`);
  });
  const tasks: string[] = [];
  for (const entry of entries.sort((left, right) => left.name.localeCompare(right.name)))
    if (entry.isDirectory() && (await exists(join(path, entry.name, 'task.toml'))))
      tasks.push(join(path, entry.name));
  if (tasks.length === 0)
    throw new GymError('VALIDATION_FAILED', `${path} holds no Harbor task (a folder with task.toml)`);
  return Promise.all(tasks.map(readHarborTask));
}

/**
 * Harbor's env values may name host variables: `${VAR}` and `${VAR:-default}`. A dataset is not
 * trusted with the operator's environment (its env values reach the agent's sandbox), so only the
 * variables in `allowed` are read from `env` (`gym eval run --task-env VAR`, or the environment's
 * `options.taskEnv`); any other is unset here. An unset variable takes its default; without one it
 * is an error naming the key, the variable and how to allow it.
 */
export function resolveTaskEnv(
  values: Readonly<Record<string, string>>,
  env: Readonly<Record<string, string | undefined>>,
  what: string,
  allowed: ReadonlySet<string>,
): Record<string, string> {
  return Object.fromEntries(
    Object.entries(values).map(([key, value]) => [
      key,
      value.replace(/\$\{([A-Za-z_]\w*)(?::-([^}]*))?\}/g, (_match, name: string, fallback?: string) => {
        const found = allowed.has(name) ? env[name] : undefined;
        if (found !== undefined && found !== '') return found;
        if (fallback !== undefined) return fallback;
        throw new GymError(
          'VALIDATION_FAILED',
          allowed.has(name)
            ? `${what} ${key}: the environment variable ${name} is not set`
            : `${what} ${key} reads the host variable ${name}, which a task may read only when the operator allows it: gym eval run --task-env ${name} (or the environment's options.taskEnv)`,
          { details: { key, variable: name } },
        );
      }),
    ]),
  );
}
