/**
 * Tar handling shared by every provider: checking an upload before anything is written,
 * re-rooting archives, and packing single files. Everything streams; an upload is spooled to a
 * temporary file (never held in memory) because "refuse the whole archive if any entry is bad"
 * means no byte may reach the sandbox before the last entry has been read.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { posix } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import * as tar from 'tar-stream';
import { GymError } from '../../core/errors.ts';
import { NAME_MAX_BYTES } from '../../core/schemas/common.ts';
import type { FileContent } from '../sandbox-provider.ts';

const ALLOWED_TYPES = new Set(['file', 'contiguous-file', 'directory', 'symlink', 'link']);
/** The kernel's own limit on symlink hops (ELOOP); a chain longer than this is refused. */
const MAX_SYMLINK_HOPS = 40;

/** tar-stream speaks streamx; the rest of the code base speaks Node streams. */
function toNodeReadable(pack: tar.Pack): Readable {
  return Readable.from(pack as AsyncIterable<Buffer>, { objectMode: false });
}

/** Pipes a Node stream into a tar extractor and settles when the extractor is done or fails. */
function feedExtractor(input: Readable, extract: tar.Extract): Promise<void> {
  return new Promise((resolve, reject) => {
    const fail = (error: Error) => {
      input.destroy();
      reject(error);
    };
    extract.on('finish', () => resolve());
    extract.on('error', fail);
    input.on('error', (error) => extract.destroy(error));
    input.pipe(extract as unknown as NodeJS.WritableStream);
  });
}

export interface SpooledArchive {
  /** A tar whose entry names are relative to `/` (the target directory is prefixed). */
  open(): Readable;
  entryCount: number;
  /** The spooled tar's size in bytes (what `open()` reads). */
  sizeBytes: number;
  /**
   * Every directory an entry is written under, as an absolute path (the target directory and
   * its ancestors included): what a provider checks for symlinks planted in the sandbox.
   */
  directories: ReadonlySet<string>;
  /** The first name segment of every entry (what the archive puts directly in the target). */
  topLevel: ReadonlySet<string>;
  dispose(): Promise<void>;
}

/**
 * The header an accepted entry is re-packed with: the checked name and link target, and plain
 * metadata. Nothing else passes through, above all not the upload's own PAX records: the engine
 * reads them after our header (a `path` or `linkpath` record would replace the checked, re-rooted
 * name with the unchecked one, `GNU.sparse.name` would rename the entry, `SCHILY.xattr.*` would
 * set extended attributes such as file capabilities). tar-stream writes the PAX records that long
 * names need itself.
 */
function repackedHeader(header: tar.Header, name: string, linkname: string | undefined): tar.Header {
  return {
    name,
    // The engine refuses a contiguous file (type 7) outright; it is a regular file everywhere else.
    type: header.type === 'contiguous-file' ? 'file' : header.type,
    size: header.size,
    mode: header.mode,
    mtime: header.mtime,
    uid: header.uid,
    gid: header.gid,
    uname: header.uname,
    gname: header.gname,
    ...(linkname === undefined ? {} : { linkname }),
  } as tar.Header;
}

function unsafe(entryName: string, reason: string): GymError {
  return new GymError('ARCHIVE_UNSAFE', `archive entry "${entryName}" ${reason}; nothing was written`, {
    details: { entry: entryName, reason },
  });
}

/** Normalises an entry name to `a/b/c` form, refusing absolute names and any `..` segment. */
function normalizeEntryName(name: string): string {
  if (name.startsWith('/')) throw unsafe(name, 'has an absolute name');
  const segments = name.split('/').filter((segment) => segment !== '' && segment !== '.');
  if (segments.includes('..')) throw unsafe(name, 'climbs out with ".."');
  // The engine answers these with a bare 500 half way through the write: refuse them up front.
  if (segments.some((segment) => Buffer.byteLength(segment) > NAME_MAX_BYTES))
    throw new GymError(
      'VALIDATION_FAILED',
      `archive entry "${name}" has a name longer than ${NAME_MAX_BYTES} bytes`,
      {
        details: { entry: name },
      },
    );
  return segments.join('/');
}

/**
 * Follows `target` from directory `fromSegments` through the archive's own symlinks and reports
 * whether it stays inside the root. Lexical checks alone are not enough: `a -> b/..` escapes if
 * `b` is itself a link to `..`.
 */
function staysInside(
  symlinks: ReadonlyMap<string, string>,
  fromSegments: string[],
  target: string,
  atRoot: boolean,
): boolean {
  if (target.startsWith('/') && !atRoot) return false;
  const resolved = target.startsWith('/') ? [] : [...fromSegments];
  const pending = target.split('/');
  let hops = 0;
  while (pending.length > 0) {
    const segment = pending.shift()!;
    if (segment === '' || segment === '.') continue;
    if (segment === '..') {
      // At the sandbox's root `..` stays at the root, as the kernel resolves `/..`.
      if (resolved.length === 0) {
        if (atRoot) continue;
        return false;
      }
      resolved.pop();
      continue;
    }
    resolved.push(segment);
    const linkTarget = symlinks.get(resolved.join('/'));
    if (linkTarget === undefined) continue;
    hops += 1;
    if (hops > MAX_SYMLINK_HOPS || (linkTarget.startsWith('/') && !atRoot)) return false;
    resolved.pop();
    if (linkTarget.startsWith('/')) resolved.length = 0;
    pending.unshift(...linkTarget.split('/'));
  }
  return true;
}

/** What an archive makes of its own names so far: which are not directories, which hold entries. */
interface ArchiveLayout {
  /** Names the archive makes a file or a link. */
  nonDirectories: Set<string>;
  /** Every proper prefix of every entry's name: what must be (or become) a directory. */
  parents: Set<string>;
}

/**
 * Refuses an entry that goes under a name the archive itself makes a file or a link, in either
 * order. The sandbox check sees only what exists before the write, so a link the archive makes
 * (`x -> planted`, `y -> .`) would otherwise carry the entries under it wherever the sandbox's
 * own links point: the engine and tar both write through it.
 */
function refuseOverlap(layout: ArchiveLayout, name: string, notDirectory: boolean, entryName: string): void {
  const segments = name.split('/');
  for (let depth = 1; depth < segments.length; depth += 1) {
    const parent = segments.slice(0, depth).join('/');
    if (layout.nonDirectories.has(parent))
      throw unsafe(entryName, `goes under "${parent}", which this archive makes a file or a link`);
    layout.parents.add(parent);
  }
  if (notDirectory) {
    if (layout.parents.has(name))
      throw unsafe(entryName, `makes "${name}" a file or a link, and this archive puts entries under it`);
    layout.nonDirectories.add(name);
  }
}

/**
 * Reads a whole tar, checks every entry, and writes a re-rooted copy (names prefixed with
 * `targetDirectory`, relative to `/`) to a temporary file. Throws `ARCHIVE_UNSAFE` or
 * `VALIDATION_FAILED` without leaving anything behind.
 */
export async function spoolSafeArchive(
  input: Readable,
  targetDirectory: string,
  options: {
    /**
     * Whether the tar is extracted where it is spooled for: only then do links resolve as
     * checked. Default true; false (an image plan's files, spooled at `/` and unpacked at their
     * step's path) keeps the root's links to the strict rule.
     */
    extractedAtTarget?: boolean;
  } = {},
): Promise<SpooledArchive> {
  const prefix = posix.normalize(targetDirectory).replace(/^\/+/, '').replace(/\/+$/, '');
  // Written at the sandbox's root, no link can point outside it: the sandbox resolves `/x` and
  // `/..` within its own root (the extraction runs in the sandbox, or in the engine's chroot of
  // it), so a root filesystem's absolute links (`/etc/localtime -> /usr/share/...`) are allowed
  // there. Entries under a link of the archive or of the sandbox stay refused (below, and the
  // provider's check of the directories written into).
  const atRoot = prefix === '' && options.extractedAtTarget !== false;
  const directory = await mkdtemp(posix.join(tmpdir(), 'gym-archive-'));
  const spoolPath = posix.join(directory, 'upload.tar');
  const dispose = () => rm(directory, { recursive: true, force: true });
  const symlinks = new Map<string, string>();
  const regularFiles = new Set<string>();
  const directories = new Set<string>([posix.join('/', prefix)]);
  const topLevel = new Set<string>();
  const layout: ArchiveLayout = { nonDirectories: new Set(), parents: new Set() };
  let entryCount = 0;

  const extract = tar.extract();
  const pack = tar.pack();
  const written = pipeline(toNodeReadable(pack), createWriteStream(spoolPath));
  extract.on('entry', (header, stream, next) => {
    // Entry streams are destroyed with the extractor's error; that error is handled once, below.
    stream.on('error', () => {});
    const fail = (error: unknown) => {
      stream.resume();
      next(error as Error);
    };
    try {
      // tar-stream names an unknown typeflag null. Other readers take it as a regular file (GNU
      // tar) or refuse it (the Docker engine), so it has no one meaning to check: refuse it.
      if (header.type === null || header.type === undefined)
        throw unsafe(header.name, 'is of a type that is not a file, directory or link');
      if (!ALLOWED_TYPES.has(header.type))
        throw unsafe(header.name, `is a ${header.type}, which is not allowed`);
      const name = normalizeEntryName(header.name);
      if (name === '') {
        stream.resume();
        next();
        return;
      }
      const segments = name.split('/');
      refuseOverlap(layout, name, header.type !== 'directory', header.name);
      topLevel.add(segments[0]!);
      const outName = prefix === '' ? name : `${prefix}/${name}`;
      let outLinkname: string | undefined;
      if (header.type === 'symlink') {
        const target = header.linkname ?? '';
        if (target === '' || (target.startsWith('/') && !atRoot))
          throw unsafe(header.name, `is a link to "${target}", outside the target`);
        symlinks.set(name, target);
        outLinkname = target;
        if (!staysInside(symlinks, segments.slice(0, -1), target, atRoot)) {
          throw unsafe(header.name, `is a link to "${target}", outside the target`);
        }
      } else if (header.type === 'link') {
        const target = normalizeEntryName(header.linkname ?? '');
        if (!regularFiles.has(target))
          throw unsafe(header.name, `is a hard link to "${header.linkname}", not a file of this archive`);
        outLinkname = prefix === '' ? target : `${prefix}/${target}`;
      } else if (header.type !== 'directory') {
        regularFiles.add(name);
      }
      const outHeader = repackedHeader(header, outName, outLinkname);
      entryCount += 1;
      directories.add(
        posix.normalize(
          header.type === 'directory' ? `/${outHeader.name}` : posix.dirname(`/${outHeader.name}`),
        ),
      );
      const sink = pack.entry(outHeader, (error) => (error ? fail(error) : next()));
      sink.on('error', () => {});
      stream.pipe(sink);
    } catch (error) {
      fail(error);
    }
  });

  try {
    await feedExtractor(input, extract);
    // A link validated early may be re-pointed by a later link: check them all against the final set.
    for (const [name, target] of symlinks) {
      if (!staysInside(symlinks, name.split('/').slice(0, -1), target, atRoot)) {
        throw unsafe(name, `is a link to "${target}", outside the target`);
      }
    }
    pack.finalize();
    await written;
  } catch (error) {
    pack.destroy();
    await written.catch(() => {});
    await dispose();
    if (error instanceof GymError) throw error;
    throw new GymError(
      'VALIDATION_FAILED',
      `the upload is not a valid tar archive: ${(error as Error).message}`,
      {
        cause: error,
      },
    );
  }
  const { size: sizeBytes } = await stat(spoolPath);
  return { open: () => createReadStream(spoolPath), entryCount, sizeBytes, directories, topLevel, dispose };
}

/**
 * A name of a tar the sandbox made, relative to the directory read, or `ARCHIVE_UNSAFE`. An honest
 * `tar -c -C parent base` (the engine's, or the sandbox's own) names everything `base/...`; a
 * sandbox's replaced `tar` may name anything, and a client unpacking the download trusts the daemon.
 */
function rebasedName(name: string, stripPrefix: string, what: string): string {
  if (stripPrefix !== '' && !name.startsWith(stripPrefix))
    throw new GymError(
      'ARCHIVE_UNSAFE',
      `the sandbox's archive holds ${what} "${name}" outside the directory read`,
      {
        details: { entry: name },
      },
    );
  const rebased = name.slice(stripPrefix.length);
  if (rebased.startsWith('/') || rebased.split('/').includes('..'))
    throw new GymError(
      'ARCHIVE_UNSAFE',
      `the sandbox's archive holds ${what} "${name}", which leaves the directory read`,
      { details: { entry: name } },
    );
  return rebased;
}

/**
 * Turns a tar of `base/...` (what Docker returns for a directory) into one of the directory's
 * contents. A tar whose first entry is a file is passed through as it is. Every entry is
 * re-packed with a header of its own, never the input's PAX records: a `path` record would
 * otherwise put the entry back under its unstripped (or any) name. A name outside the directory
 * (absolute, `..`, another prefix) ends the stream with `ARCHIVE_UNSAFE`.
 */
export function rebaseArchive(input: Readable): Readable {
  const extract = tar.extract();
  const pack = tar.pack();
  let stripPrefix: string | null = null;
  // What the archive made a file or a link: `tar -c` never puts an entry under one (it walks real
  // directories), a hand-made tar does so to write through its own link.
  const nonDirectories = new Set<string>();
  extract.on('entry', (header, stream, next) => {
    stream.on('error', () => {});
    let rebased: tar.Header;
    try {
      if (stripPrefix === null) {
        stripPrefix = header.type === 'directory' ? `${header.name.replace(/\/+$/, '')}/` : '';
        rebasedName(stripPrefix.replace(/\/$/, ''), '', 'the entry');
        if (stripPrefix !== '') {
          stream.resume();
          next();
          return;
        }
      }
      const name = rebasedName(header.name, stripPrefix, 'the entry').replace(/\/+$/, '');
      if (name === '') {
        stream.resume();
        next();
        return;
      }
      const segments = name.split('/').filter((segment) => segment !== '' && segment !== '.');
      for (let depth = 1; depth < segments.length; depth += 1) {
        const parent = segments.slice(0, depth).join('/');
        if (nonDirectories.has(parent))
          throw new GymError(
            'ARCHIVE_UNSAFE',
            `the sandbox's archive holds "${header.name}" under "${parent}", which it made a file or a link`,
            { details: { entry: header.name } },
          );
      }
      if (header.type !== 'directory') nonDirectories.add(segments.join('/'));
      rebased = {
        name,
        type: header.type,
        size: header.size,
        mode: header.mode,
        mtime: header.mtime,
        uid: header.uid,
        gid: header.gid,
        uname: header.uname,
        gname: header.gname,
        devmajor: header.devmajor,
        devminor: header.devminor,
      } as tar.Header;
      if (header.type === 'link' && header.linkname)
        rebased.linkname = rebasedName(header.linkname, stripPrefix, 'a hard link to');
      else if (header.linkname) rebased.linkname = header.linkname;
    } catch (error) {
      stream.resume();
      extract.destroy(error as Error);
      return;
    }
    let sink: NodeJS.WritableStream;
    try {
      sink = pack.entry(rebased, (error) => next(error ?? undefined)) as unknown as NodeJS.WritableStream;
    } catch (error) {
      // The reader went away (the pack was destroyed): stop reading rather than throw here.
      stream.resume();
      extract.destroy(error as Error);
      return;
    }
    stream.pipe(sink);
  });
  feedExtractor(input, extract).then(
    () => pack.finalize(),
    (error: Error) => pack.destroy(error),
  );
  return toNodeReadable(pack);
}

/** A tar with one regular file, streamed. `name` is relative to the extraction directory. */
export function packSingleFile(name: string, content: FileContent, mode: number): Readable {
  const pack = tar.pack();
  const isBytes = content instanceof Uint8Array;
  const size = isBytes ? content.byteLength : content.sizeBytes;
  const sink = pack.entry({ name, size, mode, type: 'file', mtime: new Date() }, (error) => {
    if (error) pack.destroy(error);
    else pack.finalize();
  });
  if (isBytes) sink.end(Buffer.from(content.buffer, content.byteOffset, content.byteLength));
  else {
    content.stream.on('error', (error) => pack.destroy(error));
    content.stream.pipe(sink as unknown as NodeJS.WritableStream);
  }
  return toNodeReadable(pack);
}

/**
 * Reads the first regular file out of a tar stream. Returns its content stream and the header,
 * or the header alone when the first entry is not a regular file (a directory or a link).
 */
export function firstEntry(input: Readable): Promise<{ header: tar.Header; content: Readable | null }> {
  return new Promise((resolve, reject) => {
    const extract = tar.extract();
    let settled = false;
    extract.once('entry', (header, stream, next) => {
      settled = true;
      stream.on('error', () => {});
      if (header.type !== 'file' && header.type !== 'contiguous-file') {
        stream.resume();
        extract.destroy();
        input.destroy();
        resolve({ header, content: null });
        return;
      }
      const output = new PassThrough();
      stream.pipe(output as unknown as NodeJS.WritableStream);
      stream.on('end', () => {
        next();
        extract.destroy();
        input.destroy();
      });
      resolve({ header, content: output });
    });
    feedExtractor(input, extract).then(
      () => {
        if (!settled) reject(new GymError('FILE_NOT_FOUND', 'the archive holds no entry'));
      },
      (error: Error) => {
        if (!settled) reject(error);
      },
    );
  });
}

/** Symbolic link hops `readFileThroughLinks` follows, as the kernel does (ELOOP past 40). */
const MAX_LINK_FOLLOWS = 40;

/**
 * Reads a regular file through a backend that hands out single paths as tar archives (Docker's
 * archive endpoint, tar in the sandbox): a link is followed by asking again for its target,
 * resolved against the link's folder, as the sandbox's kernel would. A directory or another
 * kind of entry is `PATH_KIND_MISMATCH`.
 */
export async function readFileThroughLinks(
  path: string,
  archiveOf: (path: string) => Promise<Readable>,
): Promise<Readable> {
  let current = posix.normalize(path);
  for (let follows = 0; follows <= MAX_LINK_FOLLOWS; follows += 1) {
    const { header, content } = await firstEntry(await archiveOf(current));
    if (content !== null) return content;
    if (header.type === 'directory')
      throw new GymError('PATH_KIND_MISMATCH', `${path} is a directory, not a file`);
    if (header.type !== 'symlink')
      throw new GymError('PATH_KIND_MISMATCH', `${path} is a ${header.type}, not a regular file`);
    current = posix.resolve(posix.dirname(current), header.linkname);
  }
  throw new GymError('PATH_KIND_MISMATCH', `${path}: too many levels of symbolic links`);
}
