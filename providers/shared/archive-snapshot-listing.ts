/**
 * What an archive snapshot reads in a sandbox before it copies anything: every path of its
 * filesystem with its kind, and which of them changed since the sandbox was created, by one
 * `find` run in the sandbox (`archive-snapshot.ts` uses it on the parent and again on each child).
 *
 * Changed means a status change time (ctime) after creation: unlike the modification time, which
 * any process in the sandbox can set back (`touch -d`), the kernel alone sets ctime, to now, on
 * every write, chmod, chown, link or rename. GNU find compares it to a time (`-newerct`);
 * busybox's find only to a number of minutes back (`-cmin`), so there the capture also takes what
 * changed up to two minutes before creation (more than needed, never less); a find with neither,
 * or a sandbox clock behind the daemon's, makes the capture take everything.
 *
 * A directory renamed (its ctime new, its mtime not, since no entry was added to it, and nothing
 * below it changed) is taken whole: its entries keep their old ctime. Limit: a directory of the
 * base image renamed and then changed inside is taken only in its changed parts (on an overlay,
 * Docker's and most Kubernetes nodes', a rename of a base directory copies it, so all is new).
 * The ctime of a directory an overlay copied up is new too; what changed below it is taken.
 *
 * The sandbox's `find` is the agent's own program, so what it prints is untrusted: the daemon
 * applies the exclusions to the list itself, and the list can only ever name what the sandbox's
 * own reads (the provider's `readArchive`) reach.
 */
import { posix } from 'node:path';
import { GymError } from '../../core/errors.ts';
import { ExecRequestSchema } from '../../core/schemas/exec.ts';
import { parseOrThrow } from '../../core/validate.ts';
import type { SandboxProvider } from '../sandbox-provider.ts';

/**
 * Never captured, never removed at replay: the kernel's and the runtime's file systems, and what
 * this project puts in a sandbox for its own use (the Docker exec helper `/dev/.gym-exec`, the
 * bound busybox `/dev/.gym-tools` and `/.gym-tools` of bwrap and the SSH runtimes, the Kubernetes
 * gateway relay `/tmp/.gym-relay`), and the files the runtime writes per container (its name,
 * hosts and resolver). Session pipes are kernel pipes, not files. Read-only mounts (binds of the
 * host) are excluded too, found at capture in the sandbox's mount table.
 */
export const SNAPSHOT_EXCLUDED_PATHS: readonly string[] = [
  '/proc',
  '/sys',
  '/dev',
  '/run',
  '/.gym-tools',
  '/tmp/.gym-relay',
  '/etc/hostname',
  '/etc/hosts',
  '/etc/resolv.conf',
];

/** How far back of the recorded creation time a change still counts (clocks of a remote host may lag). */
export const CHANGE_SLACK_MS = 10_000;

export type PathKind = 'd' | 'l' | 'f';

export interface SandboxListing {
  /** `ctime`: changed paths known; `all`: the sandbox's find cannot tell, everything counts as changed. */
  mode: 'ctime' | 'all';
  /** Every path (excluded ones left out) and its kind. */
  kinds: Map<string, PathKind>;
  /** Paths changed since creation (in `all` mode: every path). */
  changed: Set<string>;
  /** Directories renamed or re-linked since creation (ctime new, mtime old): taken whole. */
  moved: Set<string>;
  /** Read-only mount points seen in the sandbox (excluded). */
  readOnlyMounts: string[];
}

const LIST_SCRIPT = `
since="$1"; shift
first=1
for x in "$@"; do
  if [ "$first" = 1 ]; then set -- "(" -path "$x"; first=0; else set -- "$@" -o -path "$x"; fi
done
set -- "$@" ")"
printf '@mounts\\0'; cat /proc/self/mountinfo 2>/dev/null | tr '\\n' '\\0'
if [ "$since" = - ]; then :
elif find / -maxdepth 0 -newerct "@$since" >/dev/null 2>&1 && find / -maxdepth 0 -newermt "@$since" >/dev/null 2>&1; then
  printf '@changed\\0'; find / "$@" -prune -o -newerct "@$since" -print0
  printf '@moved\\0'; find / "$@" -prune -o -type d -newerct "@$since" ! -newermt "@$since" -print0
elif now=$(date +%s) && [ "$now" -ge "$since" ] 2>/dev/null && find / -maxdepth 0 -cmin -1 >/dev/null 2>&1; then
  minutes=$(( (now - since) / 60 + 2 ))
  printf '@changed\\0'; find / "$@" -prune -o -cmin "-$minutes" -print0
  printf '@moved\\0'; find / "$@" -prune -o -type d -cmin "-$minutes" ! -mmin "-$minutes" -print0
fi
printf '@dirs\\0'; find / "$@" -prune -o -type d -print0
printf '@links\\0'; find / "$@" -prune -o -type l -print0
printf '@all\\0'; find / "$@" -prune -o -print0
printf '@end\\0'
`;

/** Runs `argv` in the sandbox with room for a large listing. */
export function runInSandbox(provider: SandboxProvider, id: string, argv: string[]) {
  return provider.exec(
    id,
    parseOrThrow(
      ExecRequestSchema,
      { argv, env: { LC_ALL: 'C' }, timeoutMs: 300_000, maxOutputBytes: 64 * 1024 * 1024 },
      'snapshot exec',
    ),
  );
}

/** Whether `path` is `root` or under it. */
export function isUnder(path: string, root: string): boolean {
  return path === root || path.startsWith(root === '/' ? '/' : `${root}/`);
}

export function isExcluded(path: string, excluded: readonly string[]): boolean {
  return excluded.some((root) => isUnder(path, root));
}

/** The mount points of `/proc/self/mountinfo` lines mounted read-only (other than `/`). */
function readOnlyMountPoints(lines: string[]): string[] {
  const points: string[] = [];
  for (const line of lines) {
    const fields = line.split(' ');
    const point = fields[4]?.replace(/\\([0-7]{3})/g, (_match, octal: string) =>
      String.fromCharCode(Number.parseInt(octal, 8)),
    );
    const options = fields[5]?.split(',') ?? [];
    if (point !== undefined && point !== '/' && point.startsWith('/') && options.includes('ro'))
      points.push(posix.normalize(point));
  }
  return points;
}

/**
 * Lists sandbox `id`. `sinceMs` null: kinds only (a child at replay). Output runs to 64 MiB, a
 * few hundred thousand paths; past that the listing fails rather than capture half a sandbox.
 */
export async function listSandbox(
  provider: SandboxProvider,
  id: string,
  sinceMs: number | null,
  signal?: AbortSignal,
): Promise<SandboxListing> {
  signal?.throwIfAborted();
  const since = sinceMs === null ? '-' : String(Math.floor((sinceMs - CHANGE_SLACK_MS) / 1000));
  const result = await runInSandbox(provider, id, [
    'sh',
    '-c',
    LIST_SCRIPT,
    'gym-snapshot-list',
    since,
    ...SNAPSHOT_EXCLUDED_PATHS,
  ]);
  const records = result.stdout.split('\0');
  if (result.status !== 'ok' || result.stdoutTruncated || records.at(-2) !== '@end')
    throw new GymError(
      'PROVIDER_ERROR',
      `listing sandbox ${id}'s files for a snapshot failed (${result.status}, exit ${result.exitCode}): ${result.stderr.slice(-500)}`,
      { details: { sandboxId: id } },
    );
  const sections = new Map<string, string[]>();
  let current: string[] = [];
  for (const record of records) {
    if (record.startsWith('@')) {
      current = [];
      sections.set(record.slice(1), current);
    } else if (record !== '') current.push(record);
  }
  const readOnlyMounts = readOnlyMountPoints(sections.get('mounts') ?? []);
  const excluded = [...SNAPSHOT_EXCLUDED_PATHS, ...readOnlyMounts];
  const keep = (paths: string[] | undefined) =>
    (paths ?? [])
      .map((path) => posix.normalize(path))
      .filter((path) => path.startsWith('/') && path !== '/' && !isExcluded(path, excluded));
  const kinds = new Map<string, PathKind>();
  for (const path of keep(sections.get('all'))) kinds.set(path, 'f');
  for (const path of keep(sections.get('dirs'))) if (kinds.has(path)) kinds.set(path, 'd');
  for (const path of keep(sections.get('links'))) if (kinds.has(path)) kinds.set(path, 'l');
  const mode = sections.has('changed') ? 'ctime' : 'all';
  const changed = new Set(
    mode === 'ctime' ? keep(sections.get('changed')).filter((path) => kinds.has(path)) : kinds.keys(),
  );
  const moved = new Set(keep(sections.get('moved')).filter((path) => kinds.get(path) === 'd'));
  return { mode, kinds, changed, moved, readOnlyMounts };
}

/** Whether `path` or one of its ancestors is in `roots`. */
export function underAny(path: string, roots: ReadonlySet<string>): boolean {
  for (let current = path; current !== '/' && current !== '.'; current = posix.dirname(current))
    if (roots.has(current)) return true;
  return false;
}

/**
 * The paths to read (each by one `readArchive`) to get every changed path, fewest bytes first:
 * a directory whose whole subtree changed (or was moved) is read whole; a changed file or link
 * alone, by reading its folder and keeping only it (a link is never read by its own path, which
 * a provider might follow). The other changed directories (a folder that got a new entry) carry
 * no content of their own: their mode and owner are recorded and set again at replay.
 * Past `maxReads` reads, the deepest folders' reads merge into their parents'.
 */
export function planReads(
  listing: SandboxListing,
  maxReads = 24,
): { reads: Map<string, 'whole' | 'filtered'>; wholeSubtrees: Set<string>; bareDirectories: string[] } {
  const { kinds, changed, moved } = listing;
  // A directory is wholly changed when it and everything under it changed: counted bottom up.
  const unchangedBelow = new Map<string, boolean>();
  const sorted = [...kinds.keys()].sort((left, right) => right.split('/').length - left.split('/').length);
  for (const path of sorted) {
    const stale = !changed.has(path) || unchangedBelow.get(path) === true;
    const parent = posix.dirname(path);
    if (stale && parent !== '/') unchangedBelow.set(parent, true);
  }
  // A directory whose ctime is new but mtime old was renamed, or copied up by an overlay to
  // change something below it (Docker, Kubernetes): only in the first case is nothing below it
  // changed, and then it is taken whole.
  const changedBelow = new Set<string>();
  for (const path of changed)
    for (
      let parent = posix.dirname(path);
      parent !== '/' && !changedBelow.has(parent);
      parent = posix.dirname(parent)
    )
      changedBelow.add(parent);
  const whole = (path: string) =>
    kinds.get(path) === 'd' &&
    ((moved.has(path) && !changedBelow.has(path)) ||
      (changed.has(path) && unchangedBelow.get(path) !== true));
  const wholeSubtrees = new Set<string>();
  const reads = new Map<string, 'whole' | 'filtered'>();
  const bareDirectories: string[] = [];
  const byDepth = [...kinds.keys()].sort((left, right) => left.split('/').length - right.split('/').length);
  for (const path of byDepth) {
    if (underAny(path, wholeSubtrees)) continue;
    if (whole(path)) {
      wholeSubtrees.add(path);
      reads.set(path, 'whole');
    } else if (!changed.has(path)) continue;
    else if (kinds.get(path) === 'd') bareDirectories.push(path);
    else {
      const parent = posix.dirname(path);
      if (parent === '/') reads.set(path, 'whole');
      else if (reads.get(parent) !== 'whole') reads.set(parent, 'filtered');
    }
  }
  // Too many reads: merge the deepest filtered folder reads into their parents.
  while (reads.size > maxReads) {
    const deepest = [...reads.keys()]
      .filter((path) => posix.dirname(path) !== '/')
      .sort((left, right) => right.split('/').length - left.split('/').length)[0];
    if (deepest === undefined) break;
    const parent = posix.dirname(deepest);
    for (const path of [...reads.keys()]) if (isUnder(path, parent)) reads.delete(path);
    reads.set(parent, 'filtered');
  }
  return { reads, wholeSubtrees, bareDirectories };
}
