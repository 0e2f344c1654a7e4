/**
 * The owner registry: how daemons sharing one engine tell a live peer from a dead one. Every
 * daemon keeps a small record on the host (its pid, that process's start time, the boot id, a
 * heartbeat) under one directory; a resource labelled with another daemon's id may be reclaimed
 * only when that daemon is provably gone, which needs its record. A peer with no record, or one
 * this host cannot judge, is treated as live (its resources wait for their hard deadline).
 * Whoever can write the directory can forge that proof, and a root daemon writing into a directory
 * others control follows their links: the directory must be ours alone, records are written
 * without following links, and a record that is not a regular file of ours is never believed.
 */
import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import {
  chmod,
  type FileHandle,
  lstat,
  mkdir,
  open,
  readdir,
  readFile,
  readlink,
  realpath,
  rename,
  rm,
} from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { basename, dirname, isAbsolute, join, parse, resolve, sep } from 'node:path';
import type { Clock } from '../core/clock.ts';
import { GymError } from '../core/errors.ts';
import type { Logger } from '../core/logger.ts';
import { procStatField } from '../providers/shared/proc-stat.ts';

/**
 * How long after its last heartbeat a dead daemon's resources stay untouched by peers: room for a
 * supervisor (or a user) to restart it on the same state directory, where it adopts its own
 * sandboxes. Well above the default orphan scan (60 s), which is the heartbeat period.
 */
export const DEFAULT_OWNER_GRACE_MS = 5 * 60_000;

/** Daemon ids are ours (`daemon_...`); anything else in a label is never turned into a path. */
const DAEMON_ID_PATTERN = /^[A-Za-z0-9_-]{1,64}$/;

export interface OwnerRecord {
  daemonId: string;
  pid: number;
  /** Field 22 of /proc/<pid>/stat (clock ticks since boot): a reused pid has another one. */
  processStartTime: string;
  /** /proc/sys/kernel/random/boot_id: a pid of another boot is long dead. */
  bootId: string;
  /** /proc/self/ns/pid: a pid is meaningful only inside its own pid namespace. */
  pidNamespace: string;
  hostname: string;
  /** Epoch milliseconds of the last refresh. */
  heartbeatAtMs: number;
}

/** What the host says about processes; replaceable in tests. */
export interface HostProcesses {
  /** The start time of a live process, or null when no process has that pid. */
  startTime(pid: number): Promise<string | null>;
  bootId(): Promise<string | null>;
  pidNamespace(): Promise<string | null>;
}

/** Reads /proc; on a host without it every answer is null, so no peer is ever judged gone. */
export const procHostProcesses: HostProcesses = {
  async startTime(pid) {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null);
    return stat === null ? null : (procStatField(stat, 22) ?? null);
  },
  async bootId() {
    return (await readFile('/proc/sys/kernel/random/boot_id', 'utf8').catch(() => null))?.trim() ?? null;
  },
  async pidNamespace() {
    return readlink('/proc/self/ns/pid').catch(() => null);
  },
};

/** Answers the one question reconcile asks about a resource it did not create. */
export interface OwnerLiveness {
  /** Whether the daemon of that id is provably gone and its grace period has passed. */
  isGone(daemonId: string): Promise<boolean>;
}

export interface OwnerRegistryOptions {
  daemonId: string;
  /**
   * Default: {@link defaultOwnersDirectory}. Whatever it is, it must be a real directory owned by
   * this uid (tightened to 0700) whose ancestors no other user can write: see
   * {@link ensureOwnersDirectory}.
   */
  directory?: string;
  graceMs?: number;
  /** Records of daemons gone longer than this are deleted (their resources are past any deadline). */
  pruneAfterMs: number;
  clock: Clock;
  logger: Logger;
  host?: HostProcesses;
}

/** The longest record read: a real one is a few hundred bytes. */
const MAX_RECORD_BYTES = 64 * 1024;

/** The config key named in every refusal, so an operator knows what to change. */
const SETTING = 'owners.directory';

/**
 * Where records live unless `owners.directory` says otherwise; never a directory other users can
 * write into. Root: `/run/gym/daemons` (/run is root's). Another user: `$XDG_RUNTIME_DIR/gym-daemons`
 * (the user's own 0700 runtime directory) when set, else `<os tmpdir>/gym-daemons-<uid>`, which
 * another user could create first: {@link ensureOwnersDirectory} then refuses it.
 */
export function defaultOwnersDirectory(
  host: { uid?: number; env?: NodeJS.ProcessEnv; platform?: NodeJS.Platform } = {},
): string {
  const uid = 'uid' in host ? host.uid : process.getuid?.();
  const env = host.env ?? process.env;
  if (uid === 0 && (host.platform ?? process.platform) === 'linux') return '/run/gym/daemons';
  const runtime = env.XDG_RUNTIME_DIR;
  if (runtime !== undefined && isAbsolute(runtime)) return join(runtime, 'gym-daemons');
  return join(tmpdir(), `gym-daemons-${uid ?? 'user'}`);
}

function refuse(directory: string, problem: string, details: Record<string, unknown> = {}): never {
  throw new GymError(
    'VALIDATION_FAILED',
    `owner registry directory ${directory}: ${problem}; fix that or set ${SETTING} to a directory only this user can write`,
    { details: { setting: SETTING, directory, problem, ...details } },
  );
}

/**
 * Makes `directory` safe to keep owner records in, or throws VALIDATION_FAILED naming
 * `owners.directory`. Another user who could write into it (or swap it, or one of its ancestors)
 * could forge a record that makes a live daemon look gone, so its peers destroy its sandboxes, or
 * plant links that a root daemon's writes would follow. So: every existing ancestor must belong to
 * root or to us and be writable by no one else unless sticky (as /tmp is); missing ones are made
 * 0700 and checked to be ours; the directory itself must be a real directory (no link) of ours,
 * and is tightened to 0700.
 */
export async function ensureOwnersDirectory(directory: string): Promise<void> {
  const uid = process.getuid?.();
  const target = resolve(directory);
  // No uids, no modes (Windows): nothing to check them against.
  if (uid === undefined) {
    await mkdir(target, { recursive: true });
    return;
  }
  // The deepest ancestor that exists, resolved (links like macOS /var are fine when safe); the
  // directory itself is never resolved, so a link there is refused.
  const missing: string[] = [];
  let existing = dirname(target);
  for (;;) {
    const found = await lstat(existing).then(
      () => true,
      (error: NodeJS.ErrnoException) => {
        if (error.code === 'ENOENT') return false;
        return refuse(directory, `${existing} cannot be examined (${error.code ?? error.message})`);
      },
    );
    if (found || existing === parse(existing).root) break;
    missing.unshift(basename(existing));
    existing = dirname(existing);
  }
  const real = await realpath(existing).catch((error: Error) =>
    refuse(directory, `its ancestor ${existing} cannot be resolved (${error.message})`),
  );
  const { root } = parse(real);
  const ancestors = [root, ...real.slice(root.length).split(sep).filter(Boolean)].map((_, index, parts) =>
    join(...parts.slice(0, index + 1)),
  );
  for (const ancestor of ancestors) {
    const stat = await lstat(ancestor);
    if (stat.uid !== 0 && stat.uid !== uid)
      refuse(directory, `its ancestor ${ancestor} belongs to uid ${stat.uid}, who could replace it`, {
        path: ancestor,
        ownerUid: stat.uid,
      });
    // 0o1000 is the sticky bit: others may add entries but never rename or remove ours.
    if ((stat.mode & 0o022) !== 0 && (stat.mode & 0o1000) === 0)
      refuse(
        directory,
        `its ancestor ${ancestor} is writable by other users (mode ${(stat.mode & 0o7777).toString(8)}) and not sticky`,
        { path: ancestor },
      );
  }
  const names = [...missing, basename(target)];
  let parent = real;
  for (const [index, name] of names.entries()) {
    const path = join(parent, name);
    await mkdir(path, { mode: 0o700 }).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== 'EEXIST')
        refuse(directory, `${path} cannot be created (${error.code ?? error.message})`);
    });
    const stat = await lstat(path);
    if (stat.isSymbolicLink()) refuse(directory, `${path} is a symbolic link`, { path });
    if (!stat.isDirectory()) refuse(directory, `${path} is not a directory`, { path });
    if (stat.uid !== uid)
      refuse(directory, `${path} belongs to uid ${stat.uid}, not to this user (uid ${uid})`, {
        path,
        ownerUid: stat.uid,
        uid,
      });
    // Ours: a looser mode (an older daemon's, a umask's, a user's chmod) is tightened.
    if (index === names.length - 1 && (stat.mode & 0o077) !== 0) await chmod(path, 0o700);
    parent = path;
  }
}

function isOwnerRecord(value: unknown, daemonId: string): value is OwnerRecord {
  const record = value as Partial<OwnerRecord> | null;
  return (
    typeof record === 'object' &&
    record !== null &&
    record.daemonId === daemonId &&
    Number.isInteger(record.pid) &&
    typeof record.processStartTime === 'string' &&
    typeof record.bootId === 'string' &&
    typeof record.pidNamespace === 'string' &&
    typeof record.hostname === 'string' &&
    typeof record.heartbeatAtMs === 'number' &&
    Number.isFinite(record.heartbeatAtMs)
  );
}

export class OwnerRegistry implements OwnerLiveness {
  readonly directory: string;
  readonly #daemonId: string;
  readonly #graceMs: number;
  readonly #pruneAfterMs: number;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #host: HostProcesses;
  readonly #warned = new Set<string>();

  constructor(options: OwnerRegistryOptions) {
    this.directory = options.directory ?? defaultOwnersDirectory();
    this.#daemonId = options.daemonId;
    this.#graceMs = options.graceMs ?? DEFAULT_OWNER_GRACE_MS;
    this.#pruneAfterMs = options.pruneAfterMs;
    this.#clock = options.clock;
    this.#logger = options.logger;
    this.#host = options.host ?? procHostProcesses;
  }

  #path(daemonId: string): string {
    return join(this.directory, `${daemonId}.json`);
  }

  /** Writes (or refreshes) this daemon's record, atomically; then prunes long-dead peers. */
  async heartbeat(): Promise<void> {
    const [processStartTime, bootId, pidNamespace] = await Promise.all([
      this.#host.startTime(process.pid),
      this.#host.bootId(),
      this.#host.pidNamespace(),
    ]);
    const record: OwnerRecord = {
      daemonId: this.#daemonId,
      pid: process.pid,
      processStartTime: processStartTime ?? '',
      bootId: bootId ?? '',
      pidNamespace: pidNamespace ?? '',
      hostname: hostname(),
      heartbeatAtMs: this.#clock.now(),
    };
    await ensureOwnersDirectory(this.directory);
    await this.#write(this.#path(this.#daemonId), `${JSON.stringify(record)}\n`);
    await this.#prune();
  }

  /**
   * A temporary file of a random name, created (never opened if it exists, never through a link),
   * synced, then renamed over the record: a reader sees the old record or the new one, and nothing
   * planted in the directory is ever written through.
   */
  async #write(path: string, text: string): Promise<void> {
    const temporary = `${path}.${randomBytes(8).toString('hex')}.tmp`;
    const handle = await open(
      temporary,
      constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL | (constants.O_NOFOLLOW ?? 0),
      0o600,
    );
    try {
      try {
        await handle.writeFile(text);
        await handle.sync();
      } finally {
        await handle.close();
      }
      await rename(temporary, path);
    } catch (error) {
      await rm(temporary, { force: true });
      throw error;
    }
  }

  /** Removes this daemon's record (graceful stop): its kept sandboxes then wait for their deadline. */
  async remove(): Promise<void> {
    await rm(this.#path(this.#daemonId), { force: true });
  }

  /**
   * The record of that daemon, or null: none, unreadable, malformed, or not to be trusted (a link,
   * not a regular file, not ours, in a directory that is not ours), the last ones with a warning.
   */
  async read(daemonId: string): Promise<OwnerRecord | null> {
    if (!DAEMON_ID_PATTERN.test(daemonId)) return null;
    const text = await this.#readOwnFile(this.#path(daemonId));
    if (text === null) return null;
    try {
      const record = JSON.parse(text) as unknown;
      return isOwnerRecord(record, daemonId) ? record : null;
    } catch {
      return null;
    }
  }

  /** The text of a regular file of ours in a directory of ours, never through a link; else null. */
  async #readOwnFile(path: string): Promise<string | null> {
    const uid = process.getuid?.();
    if (uid !== undefined) {
      const directory = await lstat(this.directory).catch(() => null);
      if (directory === null) return null;
      if (!directory.isDirectory() || directory.uid !== uid || (directory.mode & 0o022) !== 0) {
        this.#ignore(this.directory, 'the directory is not a directory of this user writable only by it');
        return null;
      }
    }
    let handle: FileHandle;
    try {
      // O_NONBLOCK: a FIFO planted as a record opens at once (and is refused below) instead of hanging.
      handle = await open(
        path,
        constants.O_RDONLY | (constants.O_NOFOLLOW ?? 0) | (constants.O_NONBLOCK ?? 0),
      );
    } catch (error) {
      const code = (error as NodeJS.ErrnoException).code;
      if (code === 'ENOENT') return null;
      this.#ignore(
        path,
        code === 'ELOOP' || code === 'EMLINK' ? 'is a symbolic link' : `cannot be opened (${code})`,
      );
      return null;
    }
    try {
      const stat = await handle.stat();
      if (!stat.isFile()) return this.#ignore(path, 'is not a regular file');
      if (uid !== undefined && stat.uid !== uid)
        return this.#ignore(path, `belongs to uid ${stat.uid}, not to this user (uid ${uid})`);
      if (stat.size > MAX_RECORD_BYTES) return this.#ignore(path, `is larger than ${MAX_RECORD_BYTES} bytes`);
      const buffer = Buffer.alloc(MAX_RECORD_BYTES);
      const { bytesRead } = await handle.read(buffer, 0, MAX_RECORD_BYTES, 0);
      return buffer.subarray(0, bytesRead).toString('utf8');
    } finally {
      await handle.close();
    }
  }

  /** Warns once per entry and problem (reconcile asks about the same owners every scan). */
  #ignore(path: string, problem: string): null {
    const key = `${path}\0${problem}`;
    if (!this.#warned.has(key)) {
      if (this.#warned.size >= 1000) this.#warned.clear();
      this.#warned.add(key);
      this.#logger.warn(
        { path, problem },
        'ignored an owner record that could have been forged by another user',
      );
    }
    return null;
  }

  async isGone(daemonId: string): Promise<boolean> {
    if (daemonId === this.#daemonId) return false;
    const record = await this.read(daemonId);
    if (record === null) return false;
    return (await this.#hasExited(record)) && this.#clock.now() - record.heartbeatAtMs > this.#graceMs;
  }

  /** Whether the record's process provably no longer runs. Unknown facts never prove it. */
  async #hasExited(record: OwnerRecord): Promise<boolean> {
    const [bootId, pidNamespace] = await Promise.all([this.#host.bootId(), this.#host.pidNamespace()]);
    if (bootId === null || record.bootId === '') return false;
    // A process of an earlier boot is gone, whatever its pid says now.
    if (record.bootId !== bootId) return true;
    // A daemon in another container (another pid namespace) cannot be judged by its pid here.
    if (pidNamespace === null || record.pidNamespace !== pidNamespace || record.processStartTime === '')
      return false;
    const startTime = await this.#host.startTime(record.pid);
    return startTime === null || startTime !== record.processStartTime;
  }

  async #prune(): Promise<void> {
    const names = await readdir(this.directory).catch(() => [] as string[]);
    for (const name of names) {
      if (!name.endsWith('.json')) continue;
      const record = await this.read(name.slice(0, -'.json'.length));
      if (record === null || record.daemonId === this.#daemonId) continue;
      if (this.#clock.now() - record.heartbeatAtMs <= this.#pruneAfterMs) continue;
      if (await this.#hasExited(record)) {
        await rm(this.#path(record.daemonId), { force: true });
        this.#logger.info({ daemonId: record.daemonId }, 'pruned the record of a long-gone daemon');
      }
    }
  }
}
