/**
 * A task's Compose file as both readers (`task-directory.ts` for Harbor, `terminal-bench.ts`)
 * take it: parsed and checked (compose.ts), each built companion image named after the task and
 * tagged by its build context's content, and no build context reaching out of the task by a link.
 */
import { readFile } from 'node:fs/promises';
import { relative } from 'node:path';
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
