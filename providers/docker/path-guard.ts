/**
 * Refuses writes that would pass through a symlink inside the sandbox. The engine extracts an
 * upload with the sandbox's own view of its file system, so a link an agent planted
 * (`ln -s /etc /data/evil`) turns an upload to `/data/evil/x` into one to `/etc/x`. Every
 * directory a write lands under is stat'ed by the engine itself (`HEAD .../archive`, which does
 * not follow the last component), never by a program inside the sandbox that an agent could
 * replace.
 *
 * Cost: one HEAD request per directory (0.7-2.5 ms each on a local engine). Up to 16 go out
 * at once in one round (a file upload to a depth of four: about 3 ms, against 50-100 ms for the engine's
 * putArchive); more (a large tree) go depth by depth, shallowest first, and a directory that
 * does not exist ends its branch, since nothing under it exists either.
 *
 * Limit: the check and the write are two engine calls; a process in the sandbox that swaps a
 * directory for a link in between wins that race. The check closes the plain attack and makes
 * the race narrow; it does not make the write atomic.
 */
import { posix } from 'node:path';
import type Docker from 'dockerode';
import { GymError } from '../../core/errors.ts';
import { engineStatus, wrapDockerError } from './docker-errors.ts';

/** Go's os.FileMode bits, as the engine reports them in X-Docker-Container-Path-Stat. */
const GO_MODE_DIR = 2 ** 31;
const GO_MODE_SYMLINK = 2 ** 27;
/** Stat requests in flight at once for one write. */
const STAT_CONCURRENCY = 16;

interface PathStat {
  mode: number;
  linkTarget?: string;
}

function hasBit(mode: number, bit: number): boolean {
  return Math.floor(mode / bit) % 2 === 1;
}

/** The engine's stat of one path (its last component not followed), or null when it does not exist. */
async function statPath(
  container: Docker.Container,
  path: string,
  sandboxId: string,
): Promise<PathStat | null> {
  try {
    const response = (await container.infoArchive({ path })) as unknown as NodeJS.ReadableStream & {
      headers: Record<string, string | undefined>;
      resume(): void;
    };
    response.resume();
    const header = response.headers['x-docker-container-path-stat'];
    if (header === undefined) throw new Error('the engine sent no X-Docker-Container-Path-Stat header');
    return JSON.parse(Buffer.from(header, 'base64').toString('utf8')) as PathStat;
  } catch (error) {
    // A HEAD answer has no body, so a missing path and a missing container both read as a bare
    // 404: take it as a missing path; the write that follows reports a missing container itself.
    if (engineStatus(error) === 404) return null;
    throw wrapDockerError(error, { operation: 'check upload path', sandboxId });
  }
}

/** Every directory from the root down to each of `directories`, grouped by depth, shallowest first (`/` excluded). */
function byDepth(directories: Iterable<string>): string[][] {
  const levels: Array<Set<string>> = [];
  for (const directory of directories) {
    const segments = posix.normalize(directory).split('/').filter(Boolean);
    for (let depth = 1; depth <= segments.length; depth += 1) {
      levels[depth - 1] ??= new Set();
      levels[depth - 1]!.add(`/${segments.slice(0, depth).join('/')}`);
    }
  }
  return levels.map((level) => [...level]);
}

/**
 * Throws PATH_KIND_MISMATCH when any existing directory on the way to `directories` is a
 * symlink or not a directory at all; resolves when the write can only land where it says.
 */
export async function refuseLinkedDirectories(
  container: Docker.Container,
  sandboxId: string,
  directories: Iterable<string>,
): Promise<void> {
  const missing = new Set<string>();
  const levels = byDepth(directories);
  // Few directories (a file upload): one round of requests for all, rather than one per depth.
  const rounds = levels.flat().length <= STAT_CONCURRENCY ? [levels.flat()] : levels;
  for (const level of rounds) {
    const present = level.filter((path) => !missing.has(posix.dirname(path)));
    for (const path of level) if (missing.has(posix.dirname(path))) missing.add(path);
    for (let start = 0; start < present.length; start += STAT_CONCURRENCY) {
      const batch = present.slice(start, start + STAT_CONCURRENCY);
      // Settled, and read shallowest first: below a file the engine fails the stat (ENOTDIR, a
      // bare 500), and the file above is what the caller must hear of, not the engine's error.
      const stats = await Promise.allSettled(batch.map((path) => statPath(container, path, sandboxId)));
      for (const [index, settled] of stats.entries()) {
        const path = batch[index]!;
        if (settled.status === 'rejected') throw settled.reason;
        const stat = settled.value;
        if (stat === null) missing.add(path);
        else if (hasBit(stat.mode, GO_MODE_SYMLINK)) {
          throw new GymError(
            'PATH_KIND_MISMATCH',
            `${path} is a symbolic link (to ${stat.linkTarget ?? 'an unknown target'}) in sandbox ${sandboxId}; uploads never pass through links, write to the real path instead`,
            { details: { sandboxId, path, linkTarget: stat.linkTarget ?? null } },
          );
        } else if (!hasBit(stat.mode, GO_MODE_DIR)) {
          throw new GymError('PATH_KIND_MISMATCH', `${path} is not a directory in sandbox ${sandboxId}`, {
            details: { sandboxId, path },
          });
        }
      }
    }
  }
}
