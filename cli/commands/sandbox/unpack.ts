/**
 * Unpacks a download from a sandbox (`gym sandbox cp ID:/dir ./here`) into a local directory.
 * The archive is the agent's to shape, so nothing here lets the kernel resolve a path the
 * archive chose: names are judged as text (absolute or `..` refused); every directory on an
 * entry's way is checked with `lstat` segment by segment (made here when missing, refused when a
 * link or not a directory), so nothing is written through a link, the archive's or one already
 * in the folder; files are opened with `O_EXCL | O_NOFOLLOW`; links are made last, each followed
 * segment by segment through the archive's links and the folder's own, and refused if it leaves
 * the folder. Node has no `openat`, so the walk checks paths rather than holding directories
 * open: sound while nothing else writes in the folder during the copy (the agent cannot; it
 * only shapes the archive). The files written are bounded in all (`maxBytes`): a sparse file in
 * the sandbox costs its agent nothing and this host its full apparent size.
 */
import { constants } from 'node:fs';
import { chmod, link, lstat, mkdir, open, readlink, symlink, unlink, utimes } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import * as tar from 'tar-stream';
import { GymError } from '../../../core/errors.ts';

/** 1 GiB: what one download writes on this host at most unless raised (`--max-mib`), as the Python client's. */
export const DEFAULT_MAX_DOWNLOAD_BYTES = 1024 * 1024 * 1024;

/** The kernel's own limit on symbolic links followed in one lookup (ELOOP). */
const MAX_LINK_HOPS = 40;

function unsafe(message: string, entry: string): GymError {
  return new GymError('ARCHIVE_UNSAFE', message, { details: { entry } });
}

export function downloadTooLarge(what: string, maxBytes: number): GymError {
  return new GymError(
    'FILE_TOO_LARGE',
    `${what} is larger than the download bound of ${maxBytes} bytes; pass a larger --max-mib to copy it`,
    { details: { maxBytes } },
  );
}

/** A name (or hard link target) as segments, judged on its text alone. */
function segmentsOf(name: string, what: string): string[] {
  if (name.startsWith('/')) throw unsafe(`archive ${what} "${name}" has an absolute name`, name);
  const segments = name.split('/').filter((segment) => segment !== '' && segment !== '.');
  if (segments.includes('..')) throw unsafe(`archive ${what} "${name}" climbs out with ".."`, name);
  if (name.includes('\0')) throw unsafe(`archive ${what} "${name}" holds a NUL byte`, name);
  return segments;
}

function errorCode(error: unknown): string | undefined {
  return (error as NodeJS.ErrnoException).code;
}

class Unpacking {
  readonly #root: string;
  readonly #maxBytes: number;
  #written = 0;
  readonly #files = new Set<string>();
  readonly #links = new Map<string, string>();
  readonly #directoryModes = new Map<string, number>();
  /** What the archive makes a file or a link, and every directory it puts an entry under. */
  readonly #nonDirectories = new Set<string>();
  readonly #parents = new Set<string>();

  constructor(root: string, maxBytes: number) {
    this.#root = root;
    this.#maxBytes = maxBytes;
  }

  #path(segments: string[]): string {
    return join(this.#root, ...segments);
  }

  /** Makes (or finds) the directory `segments`, never through a link. */
  async #directory(segments: string[], create = true): Promise<void> {
    for (let depth = 1; depth <= segments.length; depth += 1) {
      const path = this.#path(segments.slice(0, depth));
      let info = await lstat(path).catch((error: unknown) => {
        if (errorCode(error) === 'ENOENT' && create) return null;
        throw error;
      });
      if (info === null) {
        await mkdir(path, { mode: 0o700 }).catch((error: unknown) => {
          if (errorCode(error) !== 'EEXIST') throw error;
        });
        info = await lstat(path);
      }
      if (!info.isDirectory())
        throw unsafe(
          `${segments.slice(0, depth).join('/')} in ${this.#root} is a link or not a directory; nothing is written through it`,
          segments.join('/'),
        );
    }
  }

  /** Removes what an entry replaces (a file or a link, never a directory). */
  async #clear(segments: string[]): Promise<void> {
    const path = this.#path(segments);
    const info = await lstat(path).catch(() => null);
    if (info === null) return;
    if (info.isDirectory())
      throw unsafe(`archive entry "${segments.join('/')}" would replace a directory in ${this.#root}`, path);
    await unlink(path);
  }

  #place(segments: string[], isDirectory: boolean, name: string): void {
    for (let depth = 1; depth < segments.length; depth += 1) {
      const parent = segments.slice(0, depth).join('/');
      if (this.#nonDirectories.has(parent))
        throw unsafe(
          `archive entry "${name}" goes under "${parent}", which the archive makes a file or a link`,
          name,
        );
      this.#parents.add(parent);
    }
    const key = segments.join('/');
    if (isDirectory) return;
    if (this.#parents.has(key))
      throw unsafe(
        `archive entry "${name}" is a file or a link, and the archive puts entries under it`,
        name,
      );
    this.#nonDirectories.add(key);
  }

  async add(header: tar.Header, content: Readable): Promise<void> {
    const segments = segmentsOf(header.name, 'entry');
    if (segments.length === 0) return; // the folder itself
    const type = header.type === 'contiguous-file' ? 'file' : header.type;
    if (type !== 'file' && type !== 'directory' && type !== 'symlink' && type !== 'link')
      throw unsafe(
        `archive entry "${header.name}" is a ${type ?? 'special file'}, which is not unpacked`,
        header.name,
      );
    this.#place(segments, type === 'directory', header.name);
    const key = segments.join('/');
    if (type === 'directory') {
      await this.#directory(segments);
      this.#directoryModes.set(key, (header.mode ?? 0o755) & 0o777);
    } else if (type === 'symlink') {
      const target = header.linkname ?? '';
      if (target === '' || target.startsWith('/'))
        throw unsafe(
          `archive link "${header.name}" -> "${target}" points outside ${this.#root}`,
          header.name,
        );
      this.#links.set(key, target);
    } else if (type === 'link') {
      const target = segmentsOf(header.linkname ?? '', 'hard link target');
      if (!this.#files.has(target.join('/')))
        throw unsafe(
          `archive hard link "${header.name}" -> "${header.linkname}" is not to a file of this archive`,
          header.name,
        );
      await this.#directory(target.slice(0, -1), false);
      await this.#directory(segments.slice(0, -1));
      await this.#clear(segments);
      await link(this.#path(target), this.#path(segments));
      this.#files.add(key);
    } else {
      await this.#file(segments, header, content);
    }
  }

  async #file(segments: string[], header: tar.Header, content: Readable): Promise<void> {
    if (this.#written + (header.size ?? 0) > this.#maxBytes)
      throw downloadTooLarge(`the archive (at "${header.name}")`, this.#maxBytes);
    await this.#directory(segments.slice(0, -1));
    await this.#clear(segments);
    const path = this.#path(segments);
    const file = await open(
      path,
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | constants.O_NOFOLLOW,
      0o600,
    );
    try {
      for await (const chunk of content) {
        this.#written += (chunk as Buffer).length;
        if (this.#written > this.#maxBytes)
          throw downloadTooLarge(`the archive (at "${header.name}")`, this.#maxBytes);
        await file.write(chunk as Buffer);
      }
      // No setuid, setgid or sticky bit from a sandbox.
      await file.chmod((header.mode ?? 0o644) & 0o777);
    } finally {
      await file.close();
    }
    if (header.mtime !== undefined) await utimes(path, header.mtime, header.mtime);
    this.#files.add(segments.join('/'));
  }

  /** The target of the link at `segments`: the archive's, else one already in the folder. */
  async #linkAt(segments: string[]): Promise<string | undefined> {
    const own = this.#links.get(segments.join('/'));
    if (own !== undefined) return own;
    // Every segment before the last was found not to be a link: the kernel follows none here.
    return readlink(this.#path(segments)).catch((error: unknown) => {
      if (['ENOENT', 'EINVAL', 'ENOTDIR'].includes(errorCode(error) ?? '')) return undefined;
      throw error;
    });
  }

  /** Follows `target` from the link's directory as the kernel would, one segment at a time. */
  async #staysInside(link: string[], target: string): Promise<boolean> {
    const resolved = link.slice(0, -1);
    const pending = target.split('/');
    let hops = 0;
    while (pending.length > 0) {
      const segment = pending.shift()!;
      if (segment === '' || segment === '.') continue;
      if (segment === '..') {
        if (resolved.length === 0) return false;
        resolved.pop();
        continue;
      }
      resolved.push(segment);
      const found = await this.#linkAt(resolved);
      if (found === undefined) continue;
      hops += 1;
      if (hops > MAX_LINK_HOPS || found === '' || found.startsWith('/')) return false;
      resolved.pop();
      pending.unshift(...found.split('/'));
    }
    return true;
  }

  /** Makes the archive's links once each is known to stay inside; then the directories' modes. */
  async finish(): Promise<void> {
    for (const [name, target] of this.#links) {
      if (!(await this.#staysInside(name.split('/'), target)))
        throw unsafe(
          `archive link "${name}" -> "${target}" points outside ${this.#root}; no link was made`,
          name,
        );
    }
    for (const [name, target] of this.#links) {
      const segments = name.split('/');
      await this.#directory(segments.slice(0, -1));
      await this.#clear(segments);
      await symlink(target, this.#path(segments));
    }
    // Deepest first, so a directory made read-only does not stop the ones under it.
    const byDepth = [...this.#directoryModes].sort(([a], [b]) => b.split('/').length - a.split('/').length);
    for (const [name, mode] of byDepth) {
      await this.#directory(name.split('/'), false);
      await chmod(this.#path(name.split('/')), mode);
    }
  }
}

/**
 * Unpacks a tar stream into `directory` (made if missing). Throws ARCHIVE_UNSAFE for an entry
 * that would land outside it or a link that points outside it, FILE_TOO_LARGE once the files
 * pass `maxBytes` in all; what was unpacked before the refusal stays, the links are made only
 * when all are safe.
 */
export async function unpackDownload(
  input: Readable,
  directory: string,
  options: { maxBytes?: number } = {},
): Promise<void> {
  await mkdir(directory, { recursive: true });
  const unpacking = new Unpacking(directory, options.maxBytes ?? DEFAULT_MAX_DOWNLOAD_BYTES);
  const extract = tar.extract();
  input.on('error', (error) => extract.destroy(error));
  input.pipe(extract as unknown as NodeJS.WritableStream);
  try {
    for await (const entry of extract) {
      const content = entry as unknown as Readable;
      await unpacking.add(entry.header, content);
      content.resume();
    }
  } catch (error) {
    input.destroy();
    throw error;
  }
  await unpacking.finish();
}
