/**
 * Environments: a folder with `environment.json` (kind, default harness, data file, sandbox
 * defaults, limits), its data as JSONL, and a README. Built-in ones live beside this file.
 */
import { access, readdir, readFile, realpath } from 'node:fs/promises';
import { dirname, join, resolve, sep } from 'node:path';
import { fileURLToPath } from 'node:url';
import { GymError } from '../core/errors.ts';
import { parseOrThrow } from '../core/validate.ts';
import { EnvironmentDefinitionSchema } from './definition.ts';
import { isHarborPath, readHarborTasks } from './kinds/harbor/task-directory.ts';
import { type LoadedEnvironment, loadKind } from './kinds/kind.ts';

export { type EnvironmentDefinition, EnvironmentDefinitionSchema } from './definition.ts';
export type { LoadedEnvironment } from './kinds/kind.ts';

export const BUILT_IN_ENVIRONMENTS_DIR = fileURLToPath(new URL('.', import.meta.url));

/** Names of the folders below `directory` that hold an environment.json. */
async function environmentFolders(directory: string): Promise<string[]> {
  const entries = await readdir(directory, { withFileTypes: true });
  const names: string[] = [];
  for (const entry of entries) {
    if (!entry.isDirectory()) continue;
    const hasDefinition = await access(join(directory, entry.name, 'environment.json')).then(
      () => true,
      () => false,
    );
    if (hasDefinition) names.push(entry.name);
  }
  return names.sort();
}

export async function listEnvironments(directory = BUILT_IN_ENVIRONMENTS_DIR): Promise<LoadedEnvironment[]> {
  const names = await environmentFolders(directory);
  return Promise.all(names.map((name) => loadEnvironment(join(directory, name))));
}

/** Loads an environment by built-in name or folder path. */
export async function loadEnvironment(nameOrPath: string): Promise<LoadedEnvironment> {
  const directory = nameOrPath.includes('/')
    ? resolve(nameOrPath)
    : join(BUILT_IN_ENVIRONMENTS_DIR, nameOrPath);
  let text: string;
  try {
    text = await readFile(join(directory, 'environment.json'), 'utf8');
  } catch {
    const names = await environmentFolders(BUILT_IN_ENVIRONMENTS_DIR).catch(() => []);
    throw new GymError('VALIDATION_FAILED', `no environment "${nameOrPath}"; built in: ${names.join(', ')}`);
  }
  const definition = parseOrThrow(EnvironmentDefinitionSchema, JSON.parse(text), `environment ${nameOrPath}`);
  const implementation = await loadKind(definition.kind, directory);
  return { ...definition, directory, dataPath: join(directory, definition.data), implementation };
}

/**
 * Reads a JSONL file of task rows, naming the line of a malformed one; a Harbor task directory
 * (or a folder of them) gives one row per task. A JSONL row's `task_dir` (whose tests, solution
 * and build context are copied into sandboxes) must be a folder under the file's own folder: a
 * downloaded file of rows cannot name another folder of the host.
 */
export async function readRows(path: string): Promise<Array<Record<string, unknown>>> {
  if (await isHarborPath(path)) return readHarborTasks(path);
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (error) {
    throw new GymError('VALIDATION_FAILED', `cannot read ${path}: ${(error as Error).message}`);
  }
  const rows: Array<Record<string, unknown>> = [];
  for (const [index, line] of text.split('\n').entries()) {
    if (line.trim() === '') continue;
    let row: Record<string, unknown>;
    try {
      row = JSON.parse(line) as Record<string, unknown>;
    } catch (error) {
      throw new GymError(
        'VALIDATION_FAILED',
        `${path}:${index + 1} is not valid JSON: ${(error as Error).message}`,
      );
    }
    if (typeof row === 'object' && row !== null && row.task_dir !== undefined)
      row.task_dir = await taskDirBeside(path, row.task_dir, index + 1);
    rows.push(row);
  }
  return rows;
}

/** A JSONL row's task_dir as a real path strictly under the file's folder, else an error naming the line. */
async function taskDirBeside(file: string, taskDir: unknown, line: number): Promise<string> {
  const folder = await realpath(dirname(resolve(file)));
  const target =
    typeof taskDir === 'string' && taskDir !== ''
      ? await realpath(resolve(folder, taskDir)).catch(() => undefined)
      : undefined;
  if (target === undefined || !target.startsWith(folder + sep))
    throw new GymError(
      'VALIDATION_FAILED',
      `${file}:${line}: task_dir ${JSON.stringify(taskDir)} is not a folder under ${folder} (a row of a JSONL file may name only a task directory beside the file; give --input the task directory itself to run another)`,
      { details: { line, field: 'task_dir' } },
    );
  return target;
}
