/**
 * Terminal-Bench's own task folders (its 1.x format) as rows of the `harbor` kind, run the way
 * Terminal-Bench's harness runs them:
 *
 * - `task.yaml`: `instruction` (what the agent is told), `max_agent_timeout_sec` (default 360),
 *   `max_test_timeout_sec` (default 60), `parser_name` (`pytest`, the only parser here); its other
 *   keys (author, difficulty, tags, `run_tests_in_same_shell`, ...) are metadata to us.
 * - `docker-compose.yaml`: one service (Terminal-Bench names it `client`) built from the task's
 *   `Dockerfile` (or its `build` context) or naming an `image`; its `environment`, `working_dir`
 *   apply; Terminal-Bench's own log volumes and the `TEST_DIR=${T_BENCH_TEST_DIR}` variable are
 *   what its harness adds and mean nothing more here. Several services, networks, ports or other
 *   volumes are refused, naming what (each rollout runs in one sandbox).
 * - `tests/` is copied to /tests after the agent finishes and `run-tests.sh` beside it, run with
 *   `bash` from the image's working directory with `TEST_DIR=/tests`, and graded as Terminal-Bench
 *   grades with its pytest parser: reward 1 when pytest's short test summary lists tests and all
 *   of them passed (PASSED, XFAIL or SKIPPED), else 0. Without run-tests.sh, pytest runs /tests.
 * - `solution.sh` is the oracle's (run with bash); a `solution.yaml` (keystrokes for a terminal)
 *   has no oracle here.
 */
import { access, readFile } from 'node:fs/promises';
import { basename, join, relative, resolve, sep } from 'node:path';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import { GymError } from '../../../core/errors.ts';
import { imageRepository, imageTagOf, linkOutOf } from './build-context.ts';
import { parseDockerfile, planDockerfile } from './dockerfile.ts';
import { taskLinkOut } from './task-links.ts';
import type { HarborRow } from './task-row.ts';

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

/** Terminal-Bench's defaults (its TaskConfig). */
export const TERMINAL_BENCH_AGENT_TIMEOUT_SEC = 360;
export const TERMINAL_BENCH_TEST_TIMEOUT_SEC = 60;

const TaskYamlSchema = z.looseObject({
  instruction: z.string().refine((text) => text.trim() !== '', 'is empty'),
  max_agent_timeout_sec: z.number().positive().default(TERMINAL_BENCH_AGENT_TIMEOUT_SEC),
  max_test_timeout_sec: z.number().positive().default(TERMINAL_BENCH_TEST_TIMEOUT_SEC),
  parser_name: z.enum(['pytest'], { message: 'only the pytest parser is supported' }).default('pytest'),
});

/** What Terminal-Bench's harness itself sets on the service: nothing a task asks for. */
const HARNESS_VOLUME = /^\$\{T_BENCH_[A-Z_]+\}:\$\{T_BENCH_[A-Z_]+\}$/;
const HARNESS_ENV = /^TEST_DIR=\$\{T_BENCH_TEST_DIR\}$/;
/** Service keys that mean nothing beyond the one sandbox (its harness's names, its keeper). */
const SERVICE_KEYS = new Set([
  'build',
  'image',
  'container_name',
  'command',
  'environment',
  'working_dir',
  'volumes',
]);

interface ServiceImage {
  /** The Dockerfile's folder (the build context), when the image is built. */
  context?: string;
  dockerfile?: string;
  /** A prebuilt image it names. */
  image?: string;
  env: Record<string, string>;
  workdir?: string;
}

/** The one service of a Terminal-Bench docker-compose.yaml, or why it cannot run in one sandbox. */
function composeService(text: string, taskDir: string): ServiceImage {
  const fail = (message: string): never => {
    throw new GymError(
      'VALIDATION_FAILED',
      `Terminal-Bench task ${taskDir}: docker-compose.yaml: ${message}`,
    );
  };
  let compose: unknown;
  try {
    compose = parseYaml(text);
  } catch (error) {
    return fail(`not YAML: ${(error as Error).message}`);
  }
  const document = (compose ?? {}) as Record<string, unknown>;
  const extra = Object.keys(document).filter((key) => key !== 'services' && key !== 'version');
  if (extra.length > 0)
    fail(`${extra.join(', ')} (beyond one service) is not supported: each rollout runs in one sandbox`);
  const services = (document.services ?? {}) as Record<string, Record<string, unknown>>;
  const names = Object.keys(services);
  if (names.length !== 1)
    fail(
      `${names.length === 0 ? 'no service' : `${names.length} services (${names.join(', ')})`}: Docker Compose tasks of several services are not supported, each rollout runs in one sandbox`,
    );
  const service = services[names[0]!] ?? {};
  const unknown = Object.keys(service).filter((key) => !SERVICE_KEYS.has(key));
  if (unknown.length > 0)
    fail(`service ${names[0]}: ${unknown.join(', ')} is not supported (one sandbox, no network, no ports)`);
  const volumes = Array.isArray(service.volumes) ? service.volumes : [];
  const own = volumes.filter((volume) => typeof volume !== 'string' || !HARNESS_VOLUME.test(volume));
  if (own.length > 0)
    fail(`service ${names[0]}: volumes ${JSON.stringify(own)} are not supported (no host folders)`);
  const env: Record<string, string> = {};
  const environment = service.environment;
  const entries: Array<[string, string]> = Array.isArray(environment)
    ? environment
        .map(String)
        .filter((entry) => !HARNESS_ENV.test(entry))
        .map((entry) => {
          const at = entry.indexOf('=');
          return at === -1 ? [entry, `\${${entry}}`] : [entry.slice(0, at), entry.slice(at + 1)];
        })
    : Object.entries((environment ?? {}) as Record<string, unknown>)
        .filter(([key, value]) => !HARNESS_ENV.test(`${key}=${String(value)}`))
        .map(([key, value]) => [key, value === null ? `\${${key}}` : String(value)]);
  for (const [key, value] of entries) env[key] = value;
  const result: ServiceImage = { env };
  if (typeof service.working_dir === 'string' && !service.working_dir.includes('${'))
    result.workdir = service.working_dir;
  const build = service.build;
  if (typeof build === 'string') result.context = build;
  else if (typeof build === 'object' && build !== null) {
    const { context = '.', dockerfile } = build as { context?: string; dockerfile?: string };
    result.context = context;
    if (dockerfile !== undefined) result.dockerfile = dockerfile;
  } else if (typeof service.image === 'string' && !service.image.includes('${')) result.image = service.image;
  else result.context = '.';
  return result;
}

const inside = (folder: string, path: string) => path === folder || path.startsWith(folder + sep);

/** What a run reads from a Terminal-Bench task folder: each must be the task's own, not a link out. */
const TASK_COPIES: ReadonlyArray<[string, 'file' | 'folder']> = [
  ['task.yaml', 'file'],
  ['docker-compose.yaml', 'file'],
  ['run-tests.sh', 'file'],
  ['solution.sh', 'file'],
  ['tests', 'folder'],
];

/** Whether a folder is a Terminal-Bench task (it has task.yaml). */
export const isTerminalBenchTask = (directory: string) => exists(join(directory, 'task.yaml'));

/** Reads one Terminal-Bench task folder into a `harbor` row; errors name the file and the field. */
export async function readTerminalBenchTask(directory: string): Promise<HarborRow> {
  const taskDir = resolve(directory);
  const fail = (message: string): never => {
    throw new GymError('VALIDATION_FAILED', `Terminal-Bench task ${taskDir}: ${message}`);
  };
  // What is copied from the task (into the prompt, the sandbox, the results) must be its own,
  // whether the task builds its image or names one.
  for (const [name, kind] of TASK_COPIES) {
    const why = taskLinkOut(taskDir, name, kind);
    if (why !== undefined) fail(why);
  }
  let yaml: unknown;
  try {
    yaml = parseYaml(await readFile(join(taskDir, 'task.yaml'), 'utf8'));
  } catch (error) {
    fail(`task.yaml cannot be read: ${(error as Error).message}`);
  }
  const parsed = TaskYamlSchema.safeParse(yaml);
  if (!parsed.success)
    fail(
      `task.yaml: ${parsed.error.issues.map((issue) => `${issue.path.join('.') || '(file)'}: ${issue.message}`).join('; ')}`,
    );
  const config = parsed.data!;
  const composePath = join(taskDir, 'docker-compose.yaml');
  const service: ServiceImage = (await exists(composePath))
    ? composeService(await readFile(composePath, 'utf8'), taskDir)
    : { context: '.', env: {} };
  const id = basename(taskDir);
  let image: string;
  let build = false;
  let workdir = '/';
  let buildContext: string | undefined;
  let dockerfile: string | undefined;
  if (service.image !== undefined) image = service.image;
  else {
    buildContext = resolve(taskDir, service.context ?? '.');
    if (!inside(taskDir, buildContext)) fail(`the build context ${service.context} is outside the task`);
    dockerfile = join(buildContext, service.dockerfile ?? 'Dockerfile');
    if (!inside(buildContext, resolve(dockerfile)))
      fail(`the Dockerfile ${service.dockerfile} is outside its context`);
    if (!(await exists(dockerfile)))
      fail(`${relative(taskDir, dockerfile)} is missing (docker-compose.yaml builds it)`);
    for (const folder of ['tests', service.context ?? '.']) {
      const outside = await linkOutOf(join(taskDir, folder), `${folder}/`);
      if (outside !== undefined) fail(outside);
    }
    image = `${imageRepository(`terminal-bench-${id}`)}:${await imageTagOf(buildContext)}`;
    build = true;
    workdir = planDockerfile(parseDockerfile(await readFile(dockerfile, 'utf8'))).settings.workdir;
  }
  if (service.workdir !== undefined) workdir = service.workdir;
  if (!(await exists(join(taskDir, 'tests'))) && !(await exists(join(taskDir, 'run-tests.sh'))))
    fail('has neither tests/ nor run-tests.sh');
  return {
    id,
    instruction: config.instruction,
    task_dir: taskDir,
    image,
    build,
    workdir,
    ...(service.workdir === undefined ? {} : { workdir_from_task: true }),
    verifier_timeout_sec: config.max_test_timeout_sec,
    agent_timeout_sec: config.max_agent_timeout_sec,
    build_timeout_sec: 600,
    environment_env: service.env,
    verifier_env: {},
    solution_env: {},
    declared_network: { agent: null, verifier: null },
    format: 'terminal-bench',
    ...(buildContext === undefined ? {} : { build_context: buildContext }),
    ...(dockerfile === undefined ? {} : { dockerfile }),
  };
}
