import { lstat, readdir, readFile, stat } from 'node:fs/promises';
import { basename, join, resolve } from 'node:path';
import { parse as parseToml } from 'smol-toml';
import { z } from 'zod';
import { GymError } from '../../../core/errors.ts';
import type { ServiceSpecInput } from '../../../core/schemas/services.ts';
import { exists, imageRepository, imageTagOf, linkOutOf } from './build-context.ts';
import type { ComposeServiceRow } from './compose.ts';
import { readHarborCompose } from './compose-task.ts';
import { parseDockerfile, planDockerfile } from './dockerfile.ts';
import {
  BaselineNetworkFields,
  type DeclaredNetwork,
  declaredNetwork,
  PhaseNetworkFields,
} from './network.ts';
import { refusedArtifact } from './separate-verifier.ts';
import { taskLinkOut } from './task-links.ts';
import type { HarborRow } from './task-row.ts';
import { isTerminalBenchTask, readTerminalBenchTask } from './terminal-bench.ts';

export type { HarborRow } from './task-row.ts';

/** How long building a task's image may take at most (task.toml's build_timeout_sec). */
export const MAX_BUILD_TIMEOUT_SEC = 3600;

const EnvTableSchema = z.record(z.string(), z.union([z.string(), z.number(), z.boolean()]).transform(String));
const Seconds = z
  .number()
  .positive()
  .max(7 * 24 * 3600);

const EnvironmentSectionSchema = z.looseObject({
  build_timeout_sec: z
    .number()
    .positive()
    .max(MAX_BUILD_TIMEOUT_SEC, `must be at most ${MAX_BUILD_TIMEOUT_SEC} s (1 hour)`)
    .default(600),
  env: EnvTableSchema.default({}),
  docker_image: z.string().min(1).optional(),
  os: z
    .string()
    .transform((value) => value.toLowerCase())
    .pipe(z.enum(['linux'], { message: 'only linux tasks run here' }))
    .optional(),
  cpus: z.number().positive().optional(),
  memory_mb: z.number().int().positive().optional(),
  gpus: z.number().int().max(0, 'no GPUs here: a task that needs one cannot run').optional(),
  tpu: z.undefined({ message: 'no TPUs here: a task that needs one cannot run' }).optional(),
  /** Harbor's `workdir` overrides the image's WORKDIR. */
  workdir: z.string().startsWith('/').optional(),
  /** Harbor's agents connect to them; the servers themselves are Compose services of the task. */
  mcp_servers: z
    .array(
      z.looseObject({
        name: z.string().min(1),
        transport: z.enum(['sse', 'streamable-http', 'stdio']).default('sse'),
        url: z.string().min(1).optional(),
        command: z.string().min(1).optional(),
        args: z.array(z.string()).default([]),
      }),
    )
    .max(64)
    .optional(),
  /** Harbor's HealthcheckConfig: a shell command in the agent's sandbox, Docker's semantics. */
  healthcheck: z
    .object({
      command: z.string().min(1),
      interval_sec: z.number().positive().max(3600).default(5),
      timeout_sec: z.number().positive().max(3600).default(30),
      start_period_sec: z.number().nonnegative().max(3600).default(0),
      start_interval_sec: z.number().positive().max(3600).default(5),
      retries: z.number().int().positive().max(1000).default(3),
    })
    .strict()
    .optional(),
  ...BaselineNetworkFields,
});

/** The part of task.toml we use; other keys pass (Harbor adds them often). */
export const TaskTomlSchema = z.looseObject({
  task: z.looseObject({ name: z.string().min(1).optional() }).optional(),
  verifier: z
    .looseObject({
      timeout_sec: Seconds.default(600),
      env: EnvTableSchema.default({}),
      user: z.union([z.string(), z.number()]).transform(String).optional(),
      environment_mode: z.enum(['shared', 'separate']).optional(),
      environment: EnvironmentSectionSchema.optional(),
      ...PhaseNetworkFields,
    })
    .refine((verifier) => !(verifier.environment_mode === 'shared' && verifier.environment !== undefined), {
      message: 'environment_mode = "shared" cannot have a [verifier.environment] (Harbor refuses it too)',
    })
    .default({ timeout_sec: 600, env: {} }),
  agent: z.looseObject({ timeout_sec: Seconds.optional(), ...PhaseNetworkFields }).default({}),
  solution: z.looseObject({ env: EnvTableSchema.default({}) }).default({ env: {} }),
  environment: EnvironmentSectionSchema.default({ build_timeout_sec: 600, env: {} }),
  steps: z.undefined({ message: 'multi-step tasks are not supported' }).optional(),
});

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
  return linkOutOf(join(taskDir, 'environment'), 'environment/');
}

/** Reads one task directory; errors name the file and the field. */
export async function readHarborTask(directory: string): Promise<HarborRow> {
  const taskDir = resolve(directory);
  const where = (file: string) => join(taskDir, file);
  const fail = (message: string): never => {
    throw new GymError('VALIDATION_FAILED', `Harbor task ${taskDir}: ${message}`);
  };
  // The instruction goes into the prompt and the results: it must be the task's own file.
  for (const name of ['task.toml', 'instruction.md']) {
    const why = taskLinkOut(taskDir, name, 'file');
    if (why !== undefined) fail(why);
  }
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
  const separateVerifier =
    config.verifier.environment_mode === 'separate' || config.verifier.environment !== undefined;
  if (!(await exists(where('tests/test.sh')))) fail('tests/test.sh is missing');
  const separate = separateVerifier ? await separateVerifierFields(taskDir, config, fail) : {};
  let network: DeclaredNetwork;
  try {
    network = declaredNetwork({
      environment: config.environment,
      agent: config.agent,
      verifier: config.verifier,
      separateVerifier,
    });
  } catch (error) {
    return fail(`task.toml: ${(error as Error).message}`);
  }
  const outside = await linkOutside(taskDir);
  if (outside !== undefined) fail(outside);
  const id = config.task?.name ?? basename(taskDir);
  const dockerfile = where('environment/Dockerfile');
  const hasDockerfile = await exists(dockerfile);
  let image: string;
  let workdir = '/';
  if (config.environment.docker_image !== undefined) image = config.environment.docker_image;
  else if (hasDockerfile) image = `${imageRepository(id)}:${await imageTagOf(where('environment'))}`;
  else return fail('environment/Dockerfile is missing (and task.toml names no [environment] docker_image)');
  if (hasDockerfile && config.environment.docker_image === undefined) {
    const plan = planDockerfile(parseDockerfile(await readFile(dockerfile, 'utf8')));
    workdir = plan.settings.workdir;
  }
  if (config.environment.workdir !== undefined) workdir = config.environment.workdir;
  const compose = await readHarborCompose(taskDir, id, image, fail);
  if (compose !== undefined && separateVerifier)
    fail('a separate verifier beside Compose services is not supported: its sandbox would not reach them');
  const mcpServers = config.environment.mcp_servers ?? [];
  const unreachable = mcpServers.filter((server) => !mcpReachable(server, compose?.services ?? []));
  if (unreachable.length > 0)
    fail(
      `[[environment.mcp_servers]] ${unreachable.map((server) => server.name).join(', ')}: an MCP server must be a service of environment/docker-compose.yaml (its url's host names one) or a stdio command in the sandbox; nothing else is reachable from it`,
    );
  const healthcheck = config.environment.healthcheck;
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
    // Compose's environment of the main service, then task.toml's over it.
    environment_env: { ...compose?.main.env, ...config.environment.env },
    verifier_env: config.verifier.env,
    solution_env: config.solution.env,
    ...(config.verifier.user === undefined ? {} : { verifier_user: config.verifier.user }),
    ...(config.environment.cpus === undefined ? {} : { cpus: config.environment.cpus }),
    ...(config.environment.memory_mb === undefined ? {} : { memory_mb: config.environment.memory_mb }),
    ...(config.environment.workdir === undefined ? {} : { workdir_from_task: true }),
    declared_network: network,
    ...separate,
    ...(compose === undefined || compose.services.length === 0 ? {} : { services: compose.services }),
    ...(healthcheck === undefined ? {} : { healthcheck }),
    ...(mcpServers.length === 0 ? {} : { mcp_servers: mcpServers }),
  };
}

/** A stdio server runs in the sandbox; an HTTP one must be a service of the group (by host name). */
function mcpReachable(
  server: { transport: string; url?: string | undefined },
  services: ReadonlyArray<{ name: string }>,
) {
  if (server.transport === 'stdio') return true;
  if (server.url === undefined) return false;
  try {
    const host = new URL(server.url).hostname;
    return services.some((service) => service.name === host) || host === 'localhost' || host === '127.0.0.1';
  } catch {
    return false;
  }
}

/**
 * A separate verifier as Harbor resolves it: `[verifier.environment]`, else a copy of
 * `[environment]`; its image that environment's docker_image, else built from tests/ (whose
 * Dockerfile puts /tests/test.sh in the image).
 */
async function separateVerifierFields(
  taskDir: string,
  config: z.output<typeof TaskTomlSchema>,
  fail: (message: string) => never,
): Promise<Partial<HarborRow>> {
  const environment = config.verifier.environment ?? config.environment;
  const artifacts = ((config as { artifacts?: unknown }).artifacts ?? []) as unknown[];
  const sources = artifacts.map((entry) =>
    typeof entry === 'string' ? entry : String((entry as { source?: unknown } | null)?.source ?? ''),
  );
  for (const [index, entry] of artifacts.entries()) {
    const service =
      typeof entry === 'object' && entry !== null ? (entry as { service?: unknown }).service : undefined;
    if (service !== undefined && service !== 'main')
      fail(
        `artifacts[${index}] names the Compose service ${String(service)}: artifacts are taken from the main service only`,
      );
    const refused = refusedArtifact(sources[index]!);
    if (refused !== undefined) fail(`task.toml ${refused}`);
  }
  const tests = join(taskDir, 'tests');
  let image: string;
  let workdir = '/';
  if (environment.docker_image !== undefined) image = environment.docker_image;
  else {
    const dockerfile = join(tests, 'Dockerfile');
    if (!(await exists(dockerfile)))
      fail(
        'a separate verifier is built from tests/Dockerfile (which must put /tests/test.sh in its image), and there is none',
      );
    const outside = await linkOutOf(tests, 'tests/');
    if (outside !== undefined) fail(outside);
    image = `${imageRepository(`${config.task?.name ?? basename(taskDir)}-verifier`)}:${await imageTagOf(tests)}`;
    workdir = planDockerfile(parseDockerfile(await readFile(dockerfile, 'utf8'))).settings.workdir;
  }
  return {
    verifier_environment: {
      image,
      build: environment.docker_image === undefined,
      workdir,
      env: environment.env,
      ...(environment.cpus === undefined ? {} : { cpus: environment.cpus }),
      ...(environment.memory_mb === undefined ? {} : { memory_mb: environment.memory_mb }),
      build_timeout_sec: environment.build_timeout_sec,
    },
    artifacts: sources,
  };
}

/**
 * A task the run cannot take, as a row that says why: the run writes it as that task's failure
 * line and runs the others (a folder is never refused whole for one task).
 */
export function refusedHarborRow(taskDir: string, reason: string): HarborRow {
  return {
    id: basename(taskDir),
    instruction: '',
    task_dir: taskDir,
    image: '',
    build: false,
    workdir: '/',
    verifier_timeout_sec: 600,
    build_timeout_sec: 600,
    environment_env: {},
    verifier_env: {},
    solution_env: {},
    declared_network: { agent: null, verifier: null },
    refused: reason,
  };
}

/** Whether a folder is one task: Harbor's (task.toml) or Terminal-Bench's (task.yaml). */
const isTask = async (directory: string) =>
  (await exists(join(directory, 'task.toml'))) || (await isTerminalBenchTask(directory));

/** One task folder, in whichever of the two formats it is. */
const readTask = async (directory: string) =>
  (await exists(join(directory, 'task.toml'))) ? readHarborTask(directory) : readTerminalBenchTask(directory);

/** Whether a path is a task directory (Harbor's or Terminal-Bench's), or a folder holding some. */
export async function isHarborPath(path: string): Promise<boolean> {
  const info = await stat(path).catch(() => undefined);
  if (info?.isDirectory() !== true) return false;
  if (await isTask(path)) return true;
  const entries = await readdir(path, { withFileTypes: true });
  for (const entry of entries) if (entry.isDirectory() && (await isTask(join(path, entry.name)))) return true;
  return false;
}

/** The rows of a task directory (one) or of a folder of them (each, by folder name). */
export async function readHarborTasks(path: string): Promise<HarborRow[]> {
  if (await isTask(path)) return [await readTask(path)];
  const entries = await readdir(path, { withFileTypes: true }).catch((error: Error) => {
    throw new GymError('VALIDATION_FAILED', `cannot read ${path}: ${error.message}`);
  });
  const tasks: string[] = [];
  for (const entry of entries.sort((left, right) => left.name.localeCompare(right.name)))
    if (entry.isDirectory() && (await isTask(join(path, entry.name)))) tasks.push(join(path, entry.name));
  if (tasks.length === 0)
    throw new GymError(
      'VALIDATION_FAILED',
      `${path} holds no Harbor task (a folder with task.toml) and no Terminal-Bench task (a folder with task.yaml)`,
    );
  return Promise.all(
    tasks.map((task) =>
      readTask(task).catch((error: unknown) => {
        if (!(error instanceof GymError)) throw error;
        return refusedHarborRow(resolve(task), error.message);
      }),
    ),
  );
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

/**
 * A Compose service as the sandbox spec takes it (`spec.services`), its environment's `${VAR}`
 * resolved from `env` as task.toml's [environment] env is (only the variables in `allowed`).
 */
export function composeServiceSpec(
  service: ComposeServiceRow,
  env: Readonly<Record<string, string | undefined>>,
  allowed: ReadonlySet<string>,
): ServiceSpecInput {
  return {
    name: service.name,
    image: service.image,
    ...(service.entrypoint === undefined ? {} : { entrypoint: service.entrypoint }),
    ...(service.command === undefined ? {} : { command: service.command }),
    env: resolveTaskEnv(service.env, env, `docker-compose.yaml service ${service.name} environment`, allowed),
    ...(service.workdir === undefined ? {} : { workdir: service.workdir }),
    ...(service.user === undefined ? {} : { user: service.user }),
    ...(service.healthcheck === undefined ? {} : { healthcheck: service.healthcheck }),
    dependsOn: service.depends_on,
  };
}
