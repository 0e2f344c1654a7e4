/**
 * A task folder is the dataset's, and a dataset is not trusted with the host's files: what a run
 * copies from a task into a sandbox, a prompt or a result (tests/, run-tests.sh, solution.sh,
 * the instruction) must be the task's own. A folder that is a link, or a file that is a link
 * leading out of the task, would copy whatever the link names on this host (`tests -> ~/.ssh`),
 * and the test output (with it) would land in the rollout's line. Checked with `lstat`, when a
 * task is read and again when its files are used (a row of a JSONL file names its folder).
 */
import { lstatSync, readFileSync, realpathSync } from 'node:fs';
import { join, sep } from 'node:path';
import { GymError } from '../../../core/errors.ts';

const inside = (folder: string, path: string) => path === folder || path.startsWith(folder + sep);

/**
 * Why `name` (relative to the task folder) would bring a host file: a folder that is a link at
 * all, or a file that is a link whose target is outside the task. Undefined when it is the task's
 * own, or missing.
 */
export function taskLinkOut(taskDir: string, name: string, kind: 'file' | 'folder'): string | undefined {
  const path = join(taskDir, name);
  let isLink: boolean;
  try {
    isLink = lstatSync(path).isSymbolicLink();
  } catch {
    return undefined;
  }
  if (!isLink) return undefined;
  if (kind === 'folder') return `${name}/ is a symbolic link (it must be a folder of the task)`;
  let target: string;
  try {
    target = realpathSync(path);
  } catch {
    return `${name} is a symbolic link to nothing readable (it must be a file of the task)`;
  }
  return inside(realpathSync(taskDir), target)
    ? undefined
    : `${name} is a symbolic link out of the task (it would copy a host file into the sandbox)`;
}

/** Throws a task error (VALIDATION_FAILED, which stops the run) when `taskLinkOut` finds one. */
export function refuseTaskLinkOut(taskDir: string, name: string, kind: 'file' | 'folder'): void {
  const why = taskLinkOut(taskDir, name, kind);
  if (why !== undefined)
    throw new GymError('VALIDATION_FAILED', `task ${taskDir}: ${why}`, { details: { taskDir, path: name } });
}

/** A regular file of the task (a link staying inside it is followed), or null when there is none. */
export function readTaskFile(taskDir: string, name: string): Buffer | null {
  refuseTaskLinkOut(taskDir, name, 'file');
  let real: string;
  try {
    real = realpathSync(join(taskDir, name));
  } catch {
    return null;
  }
  return lstatSync(real).isFile() ? readFileSync(real) : null;
}
