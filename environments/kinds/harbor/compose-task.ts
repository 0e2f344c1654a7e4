/**
 * A task's Compose file as both readers (`task-directory.ts` for Harbor, `terminal-bench.ts`)
 * take it: parsed and checked (compose.ts), each built companion image named after the task and
 * tagged by its build context's content, and no build context reaching out of the task by a link.
 */
import { readFile } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { exists, imageRepository, imageTagOf, linkOutOf } from './build-context.ts';
import { type ComposeContext, type ComposeTask, parseCompose } from './compose.ts';

/**
 * @param fail throws the reader's own error (naming the task); its message names the file.
 */
export async function readComposeTask(
  path: string,
  taskId: string,
  context: Omit<ComposeContext, 'imageName'>,
  fail: (message: string) => never,
): Promise<ComposeTask> {
  const file = relative(context.taskDirectory, path);
  let task: ComposeTask;
  try {
    task = parseCompose(await readFile(path, 'utf8'), { ...context, imageName: () => '' });
  } catch (error) {
    return fail(`${file}: ${(error as Error).message}`);
  }
  for (const service of task.services) {
    if (!service.build) continue;
    const buildContext = service.build_context!;
    const name = relative(context.taskDirectory, buildContext) || '.';
    if (!(await exists(service.dockerfile!)))
      fail(
        `${file}: service ${service.name}: ${relative(context.taskDirectory, service.dockerfile!)} is missing`,
      );
    const outside = await linkOutOf(buildContext, `${name}/`);
    if (outside !== undefined) fail(`${file}: service ${service.name}: ${outside}`);
    service.image = `${imageRepository(`${taskId}-${service.name}`)}:${await imageTagOf(buildContext)}`;
  }
  return task;
}

/** Harbor's own log mounts (`${HOST_VERIFIER_LOGS_PATH}:${ENV_VERIFIER_LOGS_PATH}`): its harness's, not the task's. */
const HARBOR_LOG_VOLUME = /^\$\{HOST_[A-Z_]+_PATH\}:(\$\{ENV_[A-Z_]+_PATH\}|\/[\w/.-]+)(:rw|:ro)?$/;

/**
 * environment/docker-compose.yaml (or .yml), read as Harbor merges it over its own: `main` is the
 * agent's sandbox, built as without a Compose file (its environment applies); the others run
 * beside it. Undefined without a Compose file.
 */
export async function readHarborCompose(
  taskDir: string,
  id: string,
  mainImage: string,
  fail: (message: string) => never,
): Promise<ComposeTask | undefined> {
  for (const name of ['docker-compose.yaml', 'docker-compose.yml']) {
    const path = join(taskDir, 'environment', name);
    if (!(await exists(path))) continue;
    const environment = join(taskDir, 'environment');
    const task = await readComposeTask(
      path,
      id,
      {
        composeDirectory: environment,
        taskDirectory: taskDir,
        mainName: 'main',
        variables: { CONTEXT_DIR: environment, MAIN_IMAGE_NAME: mainImage },
        isHarnessVolume: (volume) => HARBOR_LOG_VOLUME.test(volume),
        isHarnessEnv: () => false,
      },
      fail,
    );
    return task;
  }
  return undefined;
}
