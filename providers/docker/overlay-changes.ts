/**
 * A container's changes against its image read from the host, for an overlay2 container whose
 * layer folders this process can read (the daemon as root beside the engine): its upper folder
 * holds exactly what the container changed, so the list costs what the agent changed, where the
 * engine's own change list can cost a walk of the whole image.
 *
 * Nothing here follows a link: the upper folder is the agent's, walked with `lstat`; a path is
 * looked up in the image's lower folders and the merged view only below folders that are real
 * folders in the upper one (which hide whatever the image had there), never through a link.
 */
import { createReadStream } from 'node:fs';
import { lstat, readdir, readlink } from 'node:fs/promises';
import { join, posix } from 'node:path';
import type { PathChange } from '../shared/toolchain-rules.ts';

/** The layer folders of an overlay2 container, as the engine's inspect shows them. */
export interface OverlayFolders {
  upper: string;
  /** Top layer first. */
  lowers: string[];
  merged: string;
}

/** The overlay folders of a container, or null when it is not overlay2 or they are not readable here. */
export async function overlayFolders(graphDriver: {
  Name?: string;
  Data?: Record<string, string> | null;
}): Promise<OverlayFolders | null> {
  const data = graphDriver.Data ?? {};
  if (graphDriver.Name !== 'overlay2' || !data.UpperDir || !data.LowerDir || !data.MergedDir) return null;
  const folders = { upper: data.UpperDir, lowers: data.LowerDir.split(':'), merged: data.MergedDir };
  try {
    for (const folder of [folders.upper, folders.merged, ...folders.lowers])
      if (!(await lstat(folder)).isDirectory()) return null;
    await readdir(folders.upper);
    await readdir(folders.merged);
  } catch {
    return null;
  }
  return folders;
}

const isWhiteout = (stat: { isCharacterDevice(): boolean; rdev: number }) =>
  stat.isCharacterDevice() && stat.rdev === 0;

/** Whether the image has `path` (relative): the top lower layer that has an entry decides. */
async function imageHas(lowers: ReadonlyArray<string>, path: string): Promise<boolean> {
  for (const lower of lowers) {
    try {
      return !isWhiteout(await lstat(join(lower, path)));
    } catch {
      // Not in this layer: a lower one may have it.
    }
  }
  return false;
}

/** What the image has in a folder (relative), over every lower layer, whiteouts removed. */
async function imageChildren(lowers: ReadonlyArray<string>, folder: string): Promise<Set<string>> {
  const seen = new Set<string>();
  const present = new Set<string>();
  for (const lower of lowers) {
    let entries: Array<{ name: string; isCharacterDevice(): boolean }>;
    try {
      entries = await readdir(join(lower, folder), { withFileTypes: true });
    } catch {
      continue;
    }
    for (const entry of entries) {
      if (seen.has(entry.name)) continue;
      seen.add(entry.name);
      if (!entry.isCharacterDevice() || !isWhiteout(await lstat(join(lower, folder, entry.name))))
        present.add(entry.name);
    }
  }
  return present;
}

/** The changes, in the same terms as the engine's list: added, modified (folders too), removed. */
export async function overlayChanges(folders: OverlayFolders): Promise<PathChange[]> {
  const changes: PathChange[] = [];
  // Below a folder the image did not have, nothing was the image's: no lookup in its layers.
  const walk = async (relative: string, inImage: boolean): Promise<void> => {
    const entries = await readdir(join(folders.upper, relative), { withFileTypes: true });
    const names = new Set(entries.map((entry) => entry.name));
    for (const entry of entries) {
      const path = posix.join(relative, entry.name);
      const absolute = `/${path}`;
      const stat = await lstat(join(folders.upper, path));
      if (isWhiteout(stat)) {
        changes.push({ path: absolute, change: 'removed' });
        continue;
      }
      const existed = inImage && (await imageHas(folders.lowers, path));
      changes.push({
        path: absolute,
        change: existed ? 'modified' : 'added',
        isDirectory: stat.isDirectory(),
      });
      if (stat.isDirectory()) await walk(path, existed);
    }
    if (relative === '' || !inImage) return;
    // A folder the agent removed and made again (an opaque folder) hides what the image had in
    // it: each image entry the merged view no longer shows was removed.
    const image = await imageChildren(folders.lowers, relative);
    if ([...image].every((name) => names.has(name))) return;
    const visible = new Set(await readdir(join(folders.merged, relative)));
    for (const name of image)
      if (!names.has(name) && !visible.has(name))
        changes.push({ path: `/${posix.join(relative, name)}`, change: 'removed' });
  };
  await walk('', true);
  return changes;
}

/**
 * A file or link the container copied up or added, read from its upper folder (what the
 * sandbox sees there now), or null when the upper folder does not hold it as such (the engine is
 * asked then). Every folder on the way must be a real folder of the upper layer: no link is
 * followed on the host.
 */
export async function upperFingerprint(
  folders: OverlayFolders,
  path: string,
  hash: (chunks: AsyncIterable<Buffer>) => Promise<string>,
): Promise<{ type: 'file' | 'symlink'; mode: number; linkname?: string; sha256?: string } | null> {
  const parts = path.split('/').filter((part) => part !== '');
  let current = folders.upper;
  try {
    for (const part of parts.slice(0, -1)) {
      current = join(current, part);
      if (!(await lstat(current)).isDirectory()) return null;
    }
    const target = join(current, parts.at(-1) ?? '');
    const stat = await lstat(target);
    if (stat.isSymbolicLink())
      return { type: 'symlink', mode: stat.mode & 0o7777, linkname: await readlink(target) };
    if (!stat.isFile()) return null;
    return { type: 'file', mode: stat.mode & 0o7777, sha256: await hash(createReadStream(target)) };
  } catch {
    return null;
  }
}
