/**
 * What the daemon keeps about itself in the state directory: its id (stable across restarts, so
 * its labels stay its own), its API token (mode 0600), and daemon.json, which tells the CLI where
 * it listens.
 */
import { randomBytes, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { chmod, lstat, mkdir, open, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { GymError } from '../core/errors.ts';
import { createId } from '../core/ids.ts';
import { parseStartTime } from '../providers/shared/proc-stat.ts';

export const TOKEN_FILE = 'token';
export const DAEMON_ID_FILE = 'daemon-id';
export const DAEMON_INFO_FILE = 'daemon.json';
export const LOCK_FILE = 'daemon.lock';

/** Whether a process of that pid exists (one we may not signal counts: it exists). */
export function isProcessAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * When a process started, in clock ticks after boot (field 22 of /proc/PID/stat): with the pid it
 * names one process for good, since a reused pid starts later. Null where /proc cannot tell.
 */
export function processStartTicks(pid: number): number | null {
  try {
    return parseStartTime(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return null;
  }
}

/** The pid a lock file names, or null when it is missing or unreadable. */
async function readLockOwner(path: string): Promise<number | null> {
  const owner = Number((await readFile(path, 'utf8').catch(() => '')).trim());
  return Number.isSafeInteger(owner) && owner > 0 ? owner : null;
}

function lockConflict(stateDir: string, owner: number): GymError {
  return new GymError(
    'DAEMON_CONFLICT',
    `another daemon (pid ${owner}) already uses state directory ${stateDir}; stop it with \`gym daemon stop\` or choose another --state-dir`,
    { details: { pid: owner, stateDir } },
  );
}

/** A takeover side lock older than this belongs to a starter that died mid-takeover. */
const STALE_TAKEOVER_MS = 10_000;

/**
 * Replaces a lock whose owner is dead, so that of several starters doing the same at once exactly
 * one wins. Under an O_EXCL side lock (`daemon.lock.takeover`), the lock is read again and
 * replaced only if it still names the dead owner first seen, by renaming a complete file over
 * it (atomic: no moment without a lock). Throws DAEMON_CONFLICT when another starter won.
 */
async function takeOverLock(stateDir: string, path: string, deadOwner: number | null): Promise<void> {
  const sidePath = `${path}.takeover`;
  let side: Awaited<ReturnType<typeof open>>;
  try {
    side = await open(sidePath, 'wx', 0o600);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    // Another starter is taking over right now; it wins, unless it died long ago in the middle.
    const taker = await readLockOwner(sidePath);
    const sideStat = await lstat(sidePath).catch(() => null);
    if (sideStat !== null && Date.now() - sideStat.mtimeMs > STALE_TAKEOVER_MS)
      await rm(sidePath, { force: true });
    throw lockConflict(stateDir, taker ?? deadOwner ?? 0);
  }
  try {
    await side.writeFile(`${process.pid}\n`);
    const current = await readLockOwner(path);
    if (current !== deadOwner) throw lockConflict(stateDir, current ?? 0);
    const temporary = `${path}.${process.pid}.tmp`;
    await writeFile(temporary, `${process.pid}\n`, { mode: 0o600 });
    await rename(temporary, path);
  } finally {
    await side.close();
    await rm(sidePath, { force: true });
  }
}

/**
 * Takes the state directory for this process: two daemons on one store would each take the
 * other's sandboxes for orphans. The lock file holds the owner's pid; a lock whose owner is dead
 * (a kill -9) is taken over, by exactly one of several starters (see {@link takeOverLock}).
 * Returns the release function, which removes the lock only while it is still this process's.
 */
export async function lockStateDir(stateDir: string): Promise<() => Promise<void>> {
  const path = join(stateDir, LOCK_FILE);
  const release = async () => {
    if ((await readLockOwner(path)) === process.pid) await rm(path, { force: true });
  };
  try {
    await writeFile(path, `${process.pid}\n`, { flag: 'wx', mode: 0o600 });
    return release;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  }
  const owner = await readLockOwner(path);
  if (owner !== null && isProcessAlive(owner)) throw lockConflict(stateDir, owner);
  await takeOverLock(stateDir, path, owner);
  return release;
}

async function readOrCreate(path: string, create: () => string, mode: number): Promise<string> {
  try {
    const existing = (await readFile(path, 'utf8')).trim();
    if (existing !== '') return existing;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
  }
  const value = create();
  // `wx` fails if another process created it meanwhile: then theirs wins.
  try {
    await writeFile(path, `${value}\n`, { mode, flag: 'wx' });
    return value;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'EEXIST') return (await readFile(path, 'utf8')).trim();
    throw error;
  }
}

/**
 * Creates the state directory (mode 0700), or checks an existing one: it must be a real
 * directory owned by this user, and is made 0700 if it is more open. It holds the API token and
 * the gateway's socket, so another user who can enter it owns the daemon.
 */
export async function ensureStateDir(stateDir: string): Promise<void> {
  await mkdir(stateDir, { recursive: true, mode: 0o700 });
  const stat = await lstat(stateDir);
  if (!stat.isDirectory()) {
    throw new GymError(
      'VALIDATION_FAILED',
      `state directory ${stateDir} is not a directory (a symbolic link?)`,
      {
        details: { stateDir },
      },
    );
  }
  const uid = process.getuid?.();
  if (uid !== undefined && stat.uid !== uid) {
    throw new GymError(
      'VALIDATION_FAILED',
      `state directory ${stateDir} belongs to uid ${stat.uid}, not to this user (uid ${uid}); choose another --state-dir`,
      { details: { stateDir, ownerUid: stat.uid, uid } },
    );
  }
  if ((stat.mode & 0o077) !== 0) await chmod(stateDir, 0o700);
}

/** The API token: 256 random bits, generated on first start. The file is always left at 0600. */
export async function loadOrCreateToken(stateDir: string): Promise<string> {
  const path = join(stateDir, TOKEN_FILE);
  const token = await readOrCreate(path, () => randomBytes(32).toString('base64url'), 0o600);
  await chmod(path, 0o600);
  return token;
}

export async function loadOrCreateDaemonId(stateDir: string): Promise<string> {
  return readOrCreate(join(stateDir, DAEMON_ID_FILE), () => createId('daemon', 12), 0o600);
}

export interface DaemonInfo {
  pid: number;
  daemonId: string;
  /** `http://host:port` when serving TCP. */
  url?: string;
  /** The unix socket path when serving on one. */
  socket?: string;
  startedAt: string;
  version: string;
  /** The process's start in clock ticks after boot ({@link processStartTicks}): tells a reused pid apart. */
  processStartTicks?: number;
}

/** Writes daemon.json; the process's start time is added, so `gym daemon stop` can tell a reused pid. */
export async function writeDaemonInfo(stateDir: string, info: DaemonInfo): Promise<void> {
  const ticks = info.processStartTicks ?? processStartTicks(info.pid);
  const written = ticks === null ? info : { ...info, processStartTicks: ticks };
  // Written whole or not at all (a temporary file renamed over it): readers never see half of it.
  const path = join(stateDir, DAEMON_INFO_FILE);
  const temporary = `${path}.${process.pid}.tmp`;
  await writeFile(temporary, `${JSON.stringify(written, null, 2)}\n`, { mode: 0o600 });
  await rename(temporary, path);
}

/**
 * The daemon daemon.json names, if that daemon really runs: its pid holds the state directory's
 * lock and, where /proc tells, started when daemon.json says. Otherwise the file is stale (a
 * kill -9, a reboot, a reused pid): it is removed and null returned, so nothing signals a
 * stranger's process.
 */
export async function findRunningDaemon(
  stateDir: string,
): Promise<{ info: DaemonInfo | null; staleInfo?: DaemonInfo }> {
  const info = await readDaemonInfo(stateDir);
  if (info === null || !Number.isSafeInteger(info.pid) || info.pid <= 0) return { info: null };
  const lockOwner = await readLockOwner(join(stateDir, LOCK_FILE));
  const ticks = processStartTicks(info.pid);
  const isSameProcess =
    lockOwner === info.pid &&
    isProcessAlive(info.pid) &&
    (info.processStartTicks === undefined || ticks === null || ticks === info.processStartTicks);
  if (isSameProcess) return { info };
  await removeDaemonInfo(stateDir);
  return { info: null, staleInfo: info };
}

export async function readDaemonInfo(stateDir: string): Promise<DaemonInfo | null> {
  try {
    return JSON.parse(await readFile(join(stateDir, DAEMON_INFO_FILE), 'utf8')) as DaemonInfo;
  } catch {
    return null;
  }
}

export async function removeDaemonInfo(stateDir: string): Promise<void> {
  await rm(join(stateDir, DAEMON_INFO_FILE), { force: true });
}

/**
 * Compares a presented token with the expected one, the bytes in constant time. A length
 * mismatch answers at once: every token of a kind has the same length, so the length tells
 * nothing (and hashing both on every request cost about 2% of the daemon's CPU under load).
 */
export function tokenMatches(presented: string, expected: string): boolean {
  const left = Buffer.from(presented);
  const right = Buffer.from(expected);
  return left.length === right.length && timingSafeEqual(left, right);
}
