/**
 * A task's build context, as both task readers (`task-directory.ts` for Harbor,
 * `terminal-bench.ts`) see it: the content hash its image is tagged with, the image's name, and
 * whether a link in it reaches out to the host.
 */
import { createHash } from 'node:crypto';
import { access, lstat, readdir, readFile, readlink, realpath } from 'node:fs/promises';
import { dirname, join, relative, resolve, sep } from 'node:path';

/** Bump when what a task's image holds changes for the same inputs (the image tag includes it). */
export const HARBOR_IMAGE_RECIPE_VERSION = 1;
export const HARBOR_IMAGE_PREFIX = 'gym/harbor-';

/** Whether a path exists (a broken link does not). */
export const exists = (path: string) =>
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
export async function imageTagOf(contextDirectory: string): Promise<string> {
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

/** Why a build context would reach outside itself (a link out of it), or undefined. */
export async function linkOutOf(environment: string, name: string): Promise<string | undefined> {
  if (!(await exists(environment))) return undefined;
  const real = await realpath(environment);
  for (const path of await contextFiles(environment)) {
    const absolute = join(environment, path);
    if (!(await lstat(absolute)).isSymbolicLink()) continue;
    const target = resolve(dirname(absolute), await readlink(absolute));
    const resolved = await realpath(absolute).catch(() => undefined);
    if (!inside(environment, target) || (resolved !== undefined && !inside(real, resolved)))
      return `${name}${path} is a symbolic link out of ${name} (a build could copy host files through it)`;
  }
  return undefined;
}
