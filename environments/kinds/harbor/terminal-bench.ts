/**
 * Terminal-Bench's own task folders (its 1.x format) as rows of the `harbor` kind, run the way
 * Terminal-Bench's harness runs them:
 *
 * - `task.yaml`: `instruction` (what the agent is told), `max_agent_timeout_sec` (default 360),
 *   `max_test_timeout_sec` (default 60), `parser_name` (`pytest`, the only parser here); its other
 *   keys (author, difficulty, tags, `run_tests_in_same_shell`, ...) are metadata to us.
 * - `docker-compose.yaml`: the main service (Terminal-Bench names it `client`) is the agent's
 *   sandbox, built from the task's `Dockerfile` (or its `build` context) or naming an `image`; its
 *   `environment`, `working_dir` apply; Terminal-Bench's own log volumes and the
 *   `TEST_DIR=${T_BENCH_TEST_DIR}` variable are what its harness adds and mean nothing more here.
 *   Other services (a database, a server) run beside it (compose.ts); what Compose features reach
 *   the host (ports, bind mounts, privileged, other networks) are refused, naming them.
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
import { readComposeTask } from './compose-task.ts';
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

interface ServiceImage {
  /** The Dockerfile's folder (the build context), when the image is built. */
  context?: string;
  dockerfile?: string;
  /** A prebuilt image it names. */
  image?: string;
  env: Record<string, string>;
  workdir?: string;
}

/** The main service (`client`) of a Terminal-Bench docker-compose.yaml, and the others beside it. */
async function composeServices(path: string, taskDir: string, id: string, fail: (message: string) => never) {
  const task = await readComposeTask(
    path,
    id,
    {
      composeDirectory: taskDir,
      taskDirectory: taskDir,
      variables: {},
      isHarnessVolume: (volume) => HARNESS_VOLUME.test(volume),
      isHarnessEnv: (entry) => HARNESS_ENV.test(entry),
    },
    fail,
  );
  const { main } = task;
  const service: ServiceImage = { env: main.env };
  if (main.workdir !== undefined && !main.workdir.includes('${')) service.workdir = main.workdir;
  if (main.build !== undefined) {
    service.context = relative(taskDir, main.build.context) || '.';
    if (main.build.dockerfile !== undefined)
      service.dockerfile = relative(main.build.context, main.build.dockerfile);
  } else if (main.image !== undefined) service.image = main.image;
  else service.context = '.';
  return { service, services: task.services };
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
  const id = basename(taskDir);
  const { service, services } = (await exists(composePath))
    ? await composeServices(composePath, taskDir, id, fail)
    : { service: { context: '.', env: {} } as ServiceImage, services: [] };
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
    ...(services.length === 0 ? {} : { services }),
  };
}
