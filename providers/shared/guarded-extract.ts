/**
 * Extraction of an upload inside a sandbox by a trusted static busybox (bound in read-only by the
 * provider), for backends that cannot write into a sandbox from outside it (bubblewrap,
 * Apptainer, Enroot): inside, the sandbox's links resolve within its own root, and none of its
 * own programs, which the agent may have replaced, runs.
 *
 * Before `tar -x` runs, the same shell checks that no directory the upload writes into, nor any
 * above them, is a symbolic link or not a directory: uploads never pass through links the
 * sandbox planted (the contract's cases). The caller must make sure no process of the sandbox
 * runs between the check and the extraction (stop them first), or accept that race.
 */
import { posix } from 'node:path';

const GUARDED_EXTRACT = `
busybox="$1"; shift
for path in "$@"; do
  if [ -L "$path" ]; then echo "$path is a symbolic link; uploads never pass through links" >&2; exit 3; fi
  if [ -e "$path" ] && [ ! -d "$path" ]; then echo "$path is not a directory" >&2; exit 4; fi
done
exec "$busybox" tar -x -f - -C /
`;

/** Every directory in `directories` and all above them, shallowest first. */
export function withAncestors(directories: Iterable<string>): string[] {
  const all = new Set<string>();
  for (const directory of directories)
    for (let path = posix.normalize(directory); path !== '/' && path !== '.'; path = posix.dirname(path))
      all.add(path);
  return [...all].sort((left, right) => left.split('/').length - right.split('/').length);
}

/** The busybox arguments that check `directories`, then extract the tar on stdin at `/`. */
export function guardedExtractArgs(busybox: string, directories: Iterable<string>): string[] {
  return ['sh', '-c', GUARDED_EXTRACT, 'extract', busybox, ...withAncestors(directories)];
}
