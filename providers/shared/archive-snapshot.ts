/**
 * The provider-neutral snapshot (the `archive` method of `core/schemas/snapshot.ts`), for any
 * provider, built only on the contract's exec and archive operations: the paths of a sandbox
 * that changed since it was created, as a tar file the daemon keeps, plus the list of every path
 * the sandbox had (beside it, `<file>.paths`); replayed onto a fresh sandbox of the base image,
 * it gives that sandbox the parent's files, and removes what the parent did not have.
 *
 * Capture: one `find` lists the sandbox (`archive-snapshot-listing.ts`: what counts as changed,
 * what is excluded and why), a few `readArchive` reads stream the changed paths, filtered here
 * entry by entry into one tar, bounded by `maxBytes` while it is written. Carried: regular
 * files, directories, symbolic links (absolute ones too), hard links between captured files,
 * mode (setuid bits included), numeric owner and group, modification times. Not carried, and
 * listed in the manifest's `details.skipped`: fifos, sockets and device nodes; a hard link whose
 * other name was not captured; extended attributes and file capabilities (the guarded extract
 * drops them on purpose); a path that vanished between the listing and its read.
 *
 * Point in time: the sandbox's processes keep running unless the caller stopped them first. A
 * file written during the capture may be taken half written, or not at all if it appeared after
 * the listing; each file is taken as it was when its read reached it. Stop the processes (the
 * `stopProcesses` operation) for a consistent copy.
 */
import { createReadStream, createWriteStream } from 'node:fs';
import { readFile, rm, stat, writeFile } from 'node:fs/promises';
import { posix } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import * as tar from 'tar-stream';
import { GymError } from '../../core/errors.ts';
import type { SandboxProvider } from '../sandbox-provider.ts';
import {
  isExcluded,
  listSandbox,
  type PathKind,
  planReads,
  runInSandbox,
  type SandboxListing,
  SNAPSHOT_EXCLUDED_PATHS,
  underAny,
} from './archive-snapshot-listing.ts';

export { SNAPSHOT_EXCLUDED_PATHS } from './archive-snapshot-listing.ts';

export interface ArchiveCaptureOptions {
  /** The file to write the archive to (the daemon's, mode 0600); removed again if the capture fails. */
  file: string;
  /** The most bytes the archive may hold; past it the capture fails and leaves no file. */
  maxBytes: number;
  /** When the sandbox was created (epoch ms): what changed after it is captured. */
  createdAtMs: number;
  signal?: AbortSignal;
}

/** What replay needs, JSON-serialisable (the daemon stores it in its snapshot record). */
export interface ArchiveSnapshotManifest {
  /** The tar file of changed paths. */
  file: string;
  sizeBytes: number;
  /** The method's own facts (what was removed, what was left out and why), opaque to the daemon. */
  details: Record<string, unknown>;
}

/** What `details` holds (the daemon treats it as opaque). */
interface CaptureDetails {
  /** `ctime`: only what changed since creation; `all`: the sandbox's find has no -newerct, everything. */
  changeDetection: 'ctime' | 'all';
  /** The file of every path the parent had, `<kind>` + path per line (JSON array). */
  pathsFile: string;
  entries: number;
  paths: number;
  reads: number;
  /** Directories whose own mode and owner are set again at replay: [path, octal mode, uid, gid]. */
  directoryModes: Array<[string, string, number, number]>;
  /** What was not carried and why (the first 100). */
  skipped: Array<{ path: string; reason: string }>;
  skippedCount: number;
  excluded: string[];
  durationMs: number;
}

const MAX_SKIPPED_LISTED = 100;
/** Paths per `rm`, `stat` or `chmod` exec. */
const PATHS_PER_EXEC = 256;
const ALLOWED_TYPES = new Set(['file', 'contiguous-file', 'directory', 'symlink', 'link']);

function tooLarge(id: string, maxBytes: number): GymError {
  return new GymError(
    'SNAPSHOT_TOO_LARGE',
    `the snapshot of sandbox ${id} is larger than the limit of ${maxBytes} bytes; nothing was kept`,
    { details: { sandboxId: id, maxBytes } },
  );
}

function chunks<T>(items: T[], size: number): T[][] {
  const out: T[][] = [];
  for (let start = 0; start < items.length; start += size) out.push(items.slice(start, start + size));
  return out;
}

/** Mode and owner of `paths` in the sandbox, by its `stat`; a path it cannot stat is left out. */
async function directoryModes(
  provider: SandboxProvider,
  id: string,
  paths: string[],
): Promise<Array<[string, string, number, number]>> {
  const modes: Array<[string, string, number, number]> = [];
  for (const chunk of chunks(paths, PATHS_PER_EXEC)) {
    const script = 'for p in "$@"; do stat -c "%a %u %g" -- "$p" 2>/dev/null || echo -; done';
    const result = await runInSandbox(provider, id, ['sh', '-c', script, 'gym-snapshot-stat', ...chunk]);
    const lines = result.stdout.split('\n');
    chunk.forEach((path, index) => {
      const match = /^([0-7]{1,4}) (\d+) (\d+)$/.exec(lines[index] ?? '');
      if (match) modes.push([path, match[1]!, Number(match[2]), Number(match[3])]);
    });
  }
  return modes;
}

/** A byte counter that fails the pipeline past `maxBytes`. */
function boundedCounter(maxBytes: number, onOver: () => Error): Transform & { bytes: number } {
  const counter = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      counter.bytes += chunk.length;
      if (counter.bytes > maxBytes) callback(onOver());
      else callback(null, chunk);
    },
  }) as Transform & { bytes: number };
  counter.bytes = 0;
  return counter;
}

/** Normalises a tar entry's name (`./a/`, `a//b`) to `a/b`; `` for the read's own root. */
function entryName(name: string): string {
  return name
    .split('/')
    .filter((segment) => segment !== '' && segment !== '.')
    .join('/');
}

interface CopyState {
  pack: tar.Pack;
  listing: SandboxListing;
  wholeSubtrees: ReadonlySet<string>;
  excluded: string[];
  /** Regular files written so far (what a hard link may point at). */
  files: Set<string>;
  entries: number;
  /** The read being copied, destroyed when the write fails (past the bound) so it does not wait. */
  current: { input: Readable; extract: tar.Extract } | null;
  skip(path: string, reason: string): void;
}

/** Copies the wanted entries of one read (of `root`, `whole` or `filtered`) into the pack. */
async function copyRead(state: CopyState, root: string, input: Readable): Promise<void> {
  const rootIsDirectory = state.listing.kinds.get(root) === 'd';
  const extract = tar.extract();
  state.current = { input, extract };
  const absolute = (name: string) => {
    const relative = entryName(name);
    if (!rootIsDirectory) return root;
    return relative === '' ? root : posix.join(root, relative);
  };
  extract.on('entry', (header, stream, next) => {
    stream.on('error', () => {});
    const drop = () => {
      stream.resume();
      next();
    };
    const path = absolute(header.name);
    const wanted =
      !isExcluded(path, state.excluded) &&
      (underAny(path, state.wholeSubtrees) || state.listing.changed.has(path) || !rootIsDirectory);
    if (!wanted) return drop();
    if (header.type === null || header.type === undefined || !ALLOWED_TYPES.has(header.type)) {
      state.skip(path, `a ${header.type ?? 'special file'}: tar carries files, directories and links only`);
      return drop();
    }
    let linkname = header.linkname ?? undefined;
    if (header.type === 'link') {
      const target = rootIsDirectory ? posix.join(root, entryName(linkname ?? '')) : '';
      if (!state.files.has(target)) {
        state.skip(path, 'a hard link whose other name was not captured');
        return drop();
      }
      linkname = target.slice(1);
    } else if (header.type !== 'directory' && header.type !== 'symlink') state.files.add(path);
    const out: tar.Header = {
      name: path.slice(1),
      type: header.type === 'contiguous-file' ? 'file' : header.type,
      size: header.type === 'file' || header.type === 'contiguous-file' ? header.size : 0,
      mode: header.mode,
      uid: header.uid,
      gid: header.gid,
      uname: header.uname,
      gname: header.gname,
      mtime: header.mtime,
      ...(linkname === undefined || header.type === 'directory' ? {} : { linkname }),
    } as tar.Header;
    state.entries += 1;
    try {
      const sink = state.pack.entry(out, (error) => next(error ?? undefined));
      sink.on('error', () => {});
      stream.pipe(sink as unknown as NodeJS.WritableStream);
    } catch (error) {
      stream.resume();
      next(error as Error);
    }
  });
  await new Promise<void>((resolve, reject) => {
    extract.on('finish', () => resolve());
    extract.on('error', reject);
    input.on('error', (error) => extract.destroy(error));
    input.pipe(extract as unknown as NodeJS.WritableStream);
  }).finally(() => {
    state.current = null;
  });
}

/**
 * Captures sandbox `id`'s changes since creation into `options.file` (and the path list beside
 * it). The processes keep running unless the caller stopped them (see the file's comment).
 * @throws GymError `SANDBOX_NOT_FOUND`, `SNAPSHOT_TOO_LARGE` (over `maxBytes`: no file left), `PROVIDER_ERROR`.
 */
export async function captureArchiveSnapshot(
  provider: SandboxProvider,
  id: string,
  options: ArchiveCaptureOptions,
): Promise<ArchiveSnapshotManifest> {
  const started = Date.now();
  const { file, maxBytes, signal } = options;
  const pathsFile = `${file}.paths`;
  const listing = await listSandbox(provider, id, options.createdAtMs, signal);
  const { reads, wholeSubtrees, bareDirectories } = planReads(listing);
  const modes = await directoryModes(provider, id, [...wholeSubtrees, ...bareDirectories]);
  const skipped: Array<{ path: string; reason: string }> = [];
  let skippedCount = 0;
  const state: CopyState = {
    pack: tar.pack(),
    listing,
    wholeSubtrees,
    excluded: [...SNAPSHOT_EXCLUDED_PATHS, ...listing.readOnlyMounts],
    files: new Set(),
    entries: 0,
    current: null,
    skip(path, reason) {
      skippedCount += 1;
      if (skipped.length < MAX_SKIPPED_LISTED) skipped.push({ path, reason });
    },
  };
  const counter = boundedCounter(maxBytes, () => tooLarge(id, maxBytes));
  const written = pipeline(
    Readable.from(state.pack as AsyncIterable<Buffer>),
    counter,
    createWriteStream(file, { mode: 0o600 }),
    ...(signal === undefined ? [] : [{ signal }]),
  );
  // The write fails first when the bound is passed: stop reading the sandbox then.
  let writeError: unknown = null;
  written.catch((error: unknown) => {
    writeError = error;
    state.current?.extract.destroy(error as Error);
    state.current?.input.destroy();
  });
  try {
    for (const root of [...reads.keys()].sort()) {
      if (writeError !== null) break;
      signal?.throwIfAborted();
      let input: Readable;
      try {
        input = await provider.readArchive(id, root);
      } catch (error) {
        if (error instanceof GymError && error.code === 'FILE_NOT_FOUND') {
          state.skip(root, 'gone before it was read');
          continue;
        }
        throw error;
      }
      await copyRead(state, root, input).catch((error: unknown) => {
        input.destroy();
        throw writeError ?? error;
      });
    }
    state.pack.finalize();
    await written;
    const paths = [...listing.kinds].map(([path, kind]) => kind + path);
    await writeFile(pathsFile, JSON.stringify(paths), { mode: 0o600 });
  } catch (error) {
    state.pack.destroy();
    await written.catch(() => {});
    await rm(file, { force: true });
    await rm(pathsFile, { force: true });
    if (writeError instanceof GymError) throw writeError;
    if (error instanceof GymError) throw error;
    throw new GymError(
      'PROVIDER_ERROR',
      `capturing sandbox ${id}'s files failed: ${(error as Error).message}`,
      {
        cause: error,
        details: { sandboxId: id },
      },
    );
  }
  const details: CaptureDetails = {
    changeDetection: listing.mode,
    pathsFile,
    entries: state.entries,
    paths: listing.kinds.size,
    reads: reads.size,
    directoryModes: modes,
    skipped,
    skippedCount,
    excluded: state.excluded,
    durationMs: Date.now() - started,
  };
  const { size } = await stat(file);
  return { file, sizeBytes: size, details: details as unknown as Record<string, unknown> };
}

async function readPaths(file: string): Promise<Map<string, PathKind>> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    throw new GymError('SNAPSHOT_NOT_FOUND', `the snapshot's path list ${file} is missing`, { cause: error });
  }
  const kinds = new Map<string, PathKind>();
  for (const entry of JSON.parse(text) as string[]) kinds.set(entry.slice(1), entry[0] as PathKind);
  return kinds;
}

/** Runs `argv` + each chunk of `paths`; fails on the first chunk that does not exit 0. */
async function runOverPaths(
  provider: SandboxProvider,
  id: string,
  what: string,
  argv: string[],
  paths: string[],
): Promise<void> {
  for (const chunk of chunks(paths, PATHS_PER_EXEC)) {
    const result = await runInSandbox(provider, id, [...argv, ...chunk]);
    if (result.status !== 'ok' || result.exitCode !== 0)
      throw new GymError('PROVIDER_ERROR', `${what} in sandbox ${id} failed: ${result.stderr.slice(-500)}`, {
        details: { sandboxId: id },
      });
  }
}

/**
 * Makes sandbox `id` (fresh, of the snapshot's base image, nothing run in it yet) hold the
 * snapshot's files: what the parent did not have (or had as another kind) removed, the archive
 * written over its root (through the provider's guarded `writeArchive`), the directories'
 * modes and owners set again.
 * @throws GymError `SANDBOX_NOT_FOUND`, `SNAPSHOT_NOT_FOUND` (its files are gone), `PROVIDER_ERROR`.
 */
export async function replayArchiveSnapshot(
  provider: SandboxProvider,
  id: string,
  manifest: ArchiveSnapshotManifest,
  signal?: AbortSignal,
): Promise<void> {
  const details = manifest.details as unknown as CaptureDetails;
  const parent = await readPaths(details.pathsFile ?? `${manifest.file}.paths`);
  const child = await listSandbox(provider, id, null, signal);
  const excluded = [...(details.excluded ?? SNAPSHOT_EXCLUDED_PATHS), ...child.readOnlyMounts];
  const removed = new Set<string>();
  const byDepth = [...child.kinds].sort(
    ([left], [right]) => left.split('/').length - right.split('/').length,
  );
  for (const [path, kind] of byDepth) {
    if (isExcluded(path, excluded) || underAny(path, removed)) continue;
    if (parent.get(path) !== kind) removed.add(path);
  }
  await runOverPaths(
    provider,
    id,
    'removing the paths the parent did not have',
    ['rm', '-rf', '--'],
    [...removed],
  );
  signal?.throwIfAborted();
  if ((details.entries ?? 1) > 0) await provider.writeArchive(id, '/', createReadStream(manifest.file));
  const modes = details.directoryModes ?? [];
  if (modes.length > 0) {
    const script =
      'while [ $# -ge 4 ]; do chown -h "$3:$4" -- "$1" 2>/dev/null; chmod "$2" -- "$1" 2>/dev/null; shift 4; done; true';
    const flat = modes.flatMap(([path, mode, uid, gid]) => [path, mode, String(uid), String(gid)]);
    await runOverPaths(
      provider,
      id,
      'setting directory modes',
      ['sh', '-c', script, 'gym-snapshot-modes'],
      flat,
    );
  }
}

/** Removes the snapshot's files. Idempotent. */
export async function removeArchiveSnapshot(manifest: ArchiveSnapshotManifest): Promise<void> {
  const pathsFile = (manifest.details as Partial<CaptureDetails>).pathsFile ?? `${manifest.file}.paths`;
  await rm(manifest.file, { force: true });
  await rm(pathsFile, { force: true });
}
