/**
 * What the daemon keeps about itself in the state directory: its id (stable across restarts, so
 * its labels stay its own), its API token (mode 0600), and daemon.json, which tells the CLI where
 * it listens.
 */
import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { chmod, mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { GymError } from '../core/errors.ts';
import { createId } from '../core/ids.ts';

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
 * Takes the state directory for this process: two daemons on one store would each take the
 * other's sandboxes for orphans. The lock file holds the owner's pid; a lock whose owner is dead
 * (a kill -9) is taken over. Returns the release function.
 */
export async function lockStateDir(stateDir: string): Promise<() => Promise<void>> {
  const path = join(stateDir, LOCK_FILE);
  for (let attempt = 0; attempt < 2; attempt += 1) {
    try {
      await writeFile(path, `${process.pid}\n`, { flag: 'wx', mode: 0o600 });
      return () => rm(path, { force: true });
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
      const owner = Number((await readFile(path, 'utf8').catch(() => '')).trim());
      if (Number.isInteger(owner) && owner > 0 && isProcessAlive(owner)) {
        throw new GymError(
          'DAEMON_CONFLICT',
          `another daemon (pid ${owner}) already uses state directory ${stateDir}; stop it with \`gym daemon stop\` or choose another --state-dir`,
          {
            details: { pid: owner, stateDir },
          },
        );
      }
      await rm(path, { force: true });
    }
  }
  throw new GymError('DAEMON_CONFLICT', `could not lock state directory ${stateDir}`);
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

export async function ensureStateDir(stateDir: string): Promise<void> {
  await mkdir(stateDir, { recursive: true, mode: 0o700 });
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
}

export async function writeDaemonInfo(stateDir: string, info: DaemonInfo): Promise<void> {
  await writeFile(join(stateDir, DAEMON_INFO_FILE), `${JSON.stringify(info, null, 2)}\n`, { mode: 0o600 });
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

/** Compares a presented token with the expected one in constant time (hashes equalise the lengths). */
export function tokenMatches(presented: string, expected: string): boolean {
  const left = createHash('sha256').update(presented).digest();
  const right = createHash('sha256').update(expected).digest();
  return timingSafeEqual(left, right);
}
