/**
 * What a provider shows the toolchain check (`toolchain-rules.ts` holds the rules): its view of
 * one sandbox and its pristine image, read from outside the sandbox (the changes its backend
 * lists inside a scope, stats, fingerprints, small reads), and the scope that keeps the check's
 * cost independent of what the agent does elsewhere.
 */
import { createHash } from 'node:crypto';
import { posix } from 'node:path';

export type PathChangeKind = 'added' | 'modified' | 'removed';

/** One path the backend lists as changed from the image, in the sandbox's real (resolved) paths. */
export interface PathChange {
  path: string;
  change: PathChangeKind;
  /** Whether the path is a folder in the sandbox now, when the listing tells (saves a stat). */
  isDirectory?: boolean;
}

/** What a path is, seen from outside; `resolved` is a link's target with every link followed. */
export interface PathStat {
  type: 'file' | 'directory' | 'symlink' | 'other';
  resolved?: string;
}

/** A non-directory's identity: its kind, permission bits, link text and content hash. */
export interface Fingerprint {
  type: 'file' | 'directory' | 'symlink' | 'other';
  mode: number;
  linkname?: string;
  sha256?: string;
}

/**
 * Where the check looks for changes: only there, so that what the agent does elsewhere (a million
 * files in /tmp, a node_modules in /app) costs the check nothing.
 */
export interface ChangeScope {
  /** Folders whose whole subtree is listed. */
  trees: ReadonlyArray<string>;
  /** Folders whose direct entries are listed (not what lies below them). */
  folders: ReadonlyArray<string>;
  /** Single paths listed when changed (the ancestors of the trees, pytest's files at `/`). */
  paths: ReadonlyArray<string>;
}

/**
 * How many changed entries inside the scope the check reads before it stops: past this, the
 * sandbox is graded tampered (too many to check), never an infra error nor a pass. The walk of
 * an overlay costs about 0.2 ms an entry, so this keeps a check under a minute on a busy host;
 * an honest agent is far below it (a large `pip install` adds some thousands of files to a
 * site folder, a whole `apt-get install` of a toolchain tens of thousands).
 */
export const MAX_SCOPED_CHANGES = 200_000;

/** Whether a path lies in a scope (for backends that can only filter a full change list). */
export function inScope(path: string, scope: ChangeScope): boolean {
  return (
    scope.trees.some((tree) => isUnder(path, tree)) ||
    scope.paths.includes(path) ||
    scope.folders.some((folder) => path === folder || posix.dirname(path) === folder)
  );
}

/** A full change list cut to a scope, or null past `limit` entries in it. */
export function changesInScope(
  all: ReadonlyArray<PathChange>,
  scope: ChangeScope,
  limit: number,
): PathChange[] | null {
  const kept: PathChange[] = [];
  for (const entry of all) {
    if (!inScope(entry.path, scope)) continue;
    if (kept.length >= limit) return null;
    kept.push(entry);
  }
  return kept;
}

/** A provider's view of one sandbox and its image, read from outside the sandbox. */
export interface ToolchainView {
  /**
   * The paths the backend lists as changed from the image inside `scope`, or null when there are
   * more than `limit` of them (the backend stops reading there).
   */
  listChanges(scope: ChangeScope, limit: number): Promise<PathChange[] | null>;
  /** The directories of the PATH the verifier's commands get, in order. */
  pathDirectories: ReadonlyArray<string>;
  /** Folders whose files no change list shows (mounts such as `/dev`, `/proc`, binds). */
  unseenFolders: ReadonlyArray<string>;
  /**
   * The path in the sandbox (`live`) or in the pristine image, without following its last
   * component; null when missing. The image's answers never change, so a provider may keep them.
   */
  stat(path: string, side: 'live' | 'image'): Promise<PathStat | null>;
  /** A non-directory of the sandbox (`live`) or of the pristine image; null when missing. */
  fingerprint(path: string, side: 'live' | 'image'): Promise<Fingerprint | null>;
  /** A small regular file's bytes; null when missing or not a regular file; throws past `maxBytes`. */
  read(path: string, side: 'live' | 'image', maxBytes: number): Promise<Buffer | null>;
}

/** Whether two fingerprints are the same non-directory: kind, permission bits, link text, content. */
export function sameFingerprint(left: Fingerprint | null, right: Fingerprint | null): boolean {
  if (left === null || right === null) return left === right;
  return (
    left.type === right.type &&
    (left.mode & 0o7777) === (right.mode & 0o7777) &&
    left.linkname === right.linkname &&
    left.sha256 === right.sha256
  );
}

/** Whether `path` is `folder` or lies under it (`/` holds every path). */
export const isUnder = (path: string, folder: string) =>
  folder === '/' || path === folder || path.startsWith(`${folder}/`);

/** A content hash of a stream, for fingerprints. */
export async function sha256Of(chunks: AsyncIterable<Buffer | string>): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of chunks) hash.update(chunk);
  return hash.digest('hex');
}
