/**
 * The owner registry: how daemons sharing one engine tell a live peer from a dead one. Every
 * daemon keeps a small record on the host (its pid, that process's start time, the boot id, a
 * heartbeat) under one directory; a resource labelled with another daemon's id may be reclaimed
 * only when that daemon is provably gone, which needs its record. A peer with no record, or one
 * this host cannot judge, is treated as live (its resources wait for their hard deadline).
 */
import { mkdir, readdir, readFile, readlink, rename, rm, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Clock } from '../core/clock.ts';
import type { Logger } from '../core/logger.ts';

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
    if (stat === null) return null;
    // The command name (field 2) may hold spaces and parentheses: count fields after the last ')'.
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return fields[19] ?? null;
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
  /** Default: `<os tmpdir>/gym-daemons-<uid>` (per user, mode 0700: records cannot be forged by others). */
  directory?: string;
  graceMs?: number;
  /** Records of daemons gone longer than this are deleted (their resources are past any deadline). */
  pruneAfterMs: number;
  clock: Clock;
  logger: Logger;
  host?: HostProcesses;
}

export function defaultOwnersDirectory(): string {
  return join(tmpdir(), `gym-daemons-${process.getuid?.() ?? 'user'}`);
}

export class OwnerRegistry implements OwnerLiveness {
  readonly directory: string;
  readonly #daemonId: string;
  readonly #graceMs: number;
  readonly #pruneAfterMs: number;
  readonly #clock: Clock;
  readonly #logger: Logger;
  readonly #host: HostProcesses;

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
    await mkdir(this.directory, { recursive: true, mode: 0o700 });
    const path = this.#path(this.#daemonId);
    const temporary = `${path}.${process.pid}.tmp`;
    await writeFile(temporary, `${JSON.stringify(record)}\n`, { mode: 0o600 });
    await rename(temporary, path);
    await this.#prune();
  }

  /** Removes this daemon's record (graceful stop): its kept sandboxes then wait for their deadline. */
  async remove(): Promise<void> {
    await rm(this.#path(this.#daemonId), { force: true });
  }

  async read(daemonId: string): Promise<OwnerRecord | null> {
    if (!DAEMON_ID_PATTERN.test(daemonId)) return null;
    try {
      const record = JSON.parse(await readFile(this.#path(daemonId), 'utf8')) as OwnerRecord;
      return record.daemonId === daemonId && Number.isInteger(record.pid) ? record : null;
    } catch {
      return null;
    }
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
