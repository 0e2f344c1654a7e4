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
import { lstat, opendir, readdir, readlink } from 'node:fs/promises';
import { join, posix } from 'node:path';
import { type ChangeScope, inScope, type PathChange } from '../shared/toolchain-rules.ts';

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

/**
 * The changes inside `scope`, in the same terms as the engine's list: added, modified (folders
 * too), removed; or null past `limit` entries read there. Only the scope is read: the way to each
 * of its folders is looked up name by name (never by listing a folder above it), so what the agent
 * put elsewhere costs nothing, and the entries read inside it are counted as they stream.
 */
export async function overlayChanges(
  folders: OverlayFolders,
  scope: ChangeScope,
  limit: number,
): Promise<PathChange[] | null> {
  const changes: PathChange[] = [];
  const recorded = new Set<string>();
  let read = 0;
  const over = () => {
    read += 1;
    return read > limit;
  };
  const record = (change: PathChange) => {
    if (recorded.has(change.path)) return;
    recorded.add(change.path);
    changes.push(change);
  };
  /** An entry of the upper folder, recorded; whether it is a folder (and in the image) to go on. */
  const entryChange = async (
    path: string,
    inImage: boolean,
  ): Promise<{ folder: boolean; existed: boolean } | 'absent'> => {
    let stat: Awaited<ReturnType<typeof lstat>>;
    try {
      stat = await lstat(join(folders.upper, path));
    } catch {
      return 'absent';
    }
    if (isWhiteout(stat)) {
      if (inScope(`/${path}`, scope)) record({ path: `/${path}`, change: 'removed' });
      return { folder: false, existed: false };
    }
    const existed = inImage && (await imageHas(folders.lowers, path));
    if (inScope(`/${path}`, scope))
      record({ path: `/${path}`, change: existed ? 'modified' : 'added', isDirectory: stat.isDirectory() });
    return { folder: stat.isDirectory(), existed };
  };
  // Below a folder the image did not have, nothing was the image's: no lookup in its layers.
  // `deep`: the whole subtree is listed; else only the folder's own entries.
  const list = async (relative: string, inImage: boolean, deep: boolean): Promise<boolean> => {
    const names = new Set<string>();
    const handle = await opendir(join(folders.upper, relative));
    for await (const entry of handle) {
      if (over()) return false;
      names.add(entry.name);
      const path = posix.join(relative, entry.name);
      const stat = await lstat(join(folders.upper, path));
      if (isWhiteout(stat)) {
        record({ path: `/${path}`, change: 'removed' });
        continue;
      }
      const existed = inImage && (await imageHas(folders.lowers, path));
      record({ path: `/${path}`, change: existed ? 'modified' : 'added', isDirectory: stat.isDirectory() });
      if (deep && stat.isDirectory() && !(await list(path, existed, true))) return false;
    }
    if (!inImage) return true;
    // A folder the agent removed and made again (an opaque folder) hides what the image had in
    // it: each image entry the merged view no longer shows was removed.
    const image = await imageChildren(folders.lowers, relative);
    if ([...image].every((name) => names.has(name))) return true;
    const visible = new Set(await readdir(join(folders.merged, relative)));
    for (const name of image)
      if (!names.has(name) && !visible.has(name)) {
        if (over()) return false;
        record({ path: `/${posix.join(relative, name)}`, change: 'removed' });
      }
    return true;
  };
  /** Follows the way to `target` in the upper folder, then lists it as asked. */
  const visit = async (target: string, how: 'tree' | 'folder' | 'path'): Promise<boolean> => {
    const parts = target.split('/').filter((part) => part !== '');
    let relative = '';
    let inImage = true;
    for (const part of parts) {
      // The way is a few names (as many as the path has parts), not counted against the limit.
      const path = posix.join(relative, part);
      const found = await entryChange(path, inImage);
      if (found === 'absent') {
        // Not in the upper folder: unchanged, unless its folder is opaque and hides the image's.
        if (
          inImage &&
          inScope(`/${path}`, scope) &&
          (await imageHas(folders.lowers, path)) &&
          !(await exists(join(folders.merged, path)))
        )
          record({ path: `/${path}`, change: 'removed' });
        return true;
      }
      if (!found.folder) return true;
      relative = path;
      inImage = found.existed;
    }
    if (how === 'path') return true;
    return list(relative, inImage, how === 'tree');
  };
  const trees = scope.trees.filter(
    (tree) => !scope.trees.some((other) => other !== tree && tree.startsWith(`${other}/`)),
  );
  for (const tree of new Set(trees)) if (!(await visit(tree, 'tree'))) return null;
  for (const folder of scope.folders) if (!(await visit(folder, 'folder'))) return null;
  for (const path of scope.paths) if (!(await visit(path, 'path'))) return null;
  return changes;
}

async function exists(path: string): Promise<boolean> {
  try {
    await lstat(path);
    return true;
  } catch {
    return false;
  }
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
