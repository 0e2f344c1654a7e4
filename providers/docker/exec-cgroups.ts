/**
 * Timed-out commands killed from the host, through cgroup v2, without trusting the sandbox.
 *
 * The daemon runs beside the engine as root, so it can reach a container's cgroup v2 directory
 * on the host. Each exec gets a child cgroup there, entered before the command can fork (see
 * `exec-helper/gym-exec.c`); `cgroup.kill` then kills everything in it at once, forks included.
 * Nothing inside the container can leave a cgroup: its cgroupfs is read-only and it lacks
 * CAP_SYS_ADMIN, and `env -i`, `setsid` or a double fork do not change cgroup membership.
 * Needs a kernel with `cgroup.kill` (5.14+).
 */
import { closeSync, openSync, readFileSync, write } from 'node:fs';
import { mkdir, readdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/** How long a kill or a freeze may take to show in cgroup.events before we stop waiting. */
const SETTLE_TIMEOUT_MS = 3_000;
const SETTLE_POLL_MS = 5;

/** How many processes `ContainerCgroup.hostPidOf` reads between two turns of the event loop. */
const SCAN_BATCH = 64;

/**
 * The cgroup v2 mount point named in a `/proc/self/mountinfo` text: `/sys/fs/cgroup` on a pure
 * v2 host, `/sys/fs/cgroup/unified` on a hybrid one; null when the host has none.
 */
export function findCgroup2Mount(mountinfo: string): string | null {
  for (const line of mountinfo.split('\n')) {
    // Fields: id parent major:minor root mountpoint options [optional...] - fstype source super.
    const separator = line.indexOf(' - ');
    if (separator === -1) continue;
    const fstype = line.slice(separator + 3).split(' ')[0];
    if (fstype !== 'cgroup2') continue;
    const mountPoint = line.slice(0, separator).split(' ')[4];
    if (mountPoint !== undefined) return unescapeMountPath(mountPoint);
  }
  return null;
}

/** mountinfo writes space, tab, newline and backslash as octal escapes (`\040`). */
function unescapeMountPath(path: string): string {
  return path.replace(/\\([0-7]{3})/g, (_match, octal: string) =>
    String.fromCharCode(Number.parseInt(octal, 8)),
  );
}

/** The cgroup v2 path in a `/proc/<pid>/cgroup` text (its `0::` line), e.g. `/docker/<id>`; null when absent. */
export function parseUnifiedCgroupPath(procCgroup: string): string | null {
  for (const line of procCgroup.split('\n')) {
    if (line.startsWith('0::')) {
      const path = line.slice(3).trim();
      // A path outside our cgroup namespace shows as `/..`: we cannot reach it by that name.
      return path.startsWith('/') && !path.split('/').includes('..') ? path : null;
    }
  }
  return null;
}

/** The host's cgroup v2 mount, read once per call from this process's mountinfo; null when absent. */
export function hostCgroup2Mount(): string | null {
  try {
    return findCgroup2Mount(readFileSync('/proc/self/mountinfo', 'utf8'));
  } catch {
    return null;
  }
}

function parsePids(text: string): number[] {
  return text
    .split('\n')
    .filter((line) => line !== '')
    .map(Number);
}

/** The pids of a process in each pid namespace it is in, outermost first (its `NSpid` line); null when absent. */
function nsPidLevels(status: string): number[] | null {
  const line = /^NSpid:\s*(.+)$/m.exec(status)?.[1]?.trim();
  return line === undefined ? null : line.split(/\s+/).map(Number);
}

function readOrEmpty(path: string): string {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return '';
  }
}

function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** One container's cgroup v2 directory on the host, and the child cgroups we make under it. */
export class ContainerCgroup {
  /** The container's cgroup directory on the host (`<mount>/docker/<id>` here). */
  readonly path: string;
  /** Where procfs is (another root only in tests). */
  readonly #procRoot: string;
  #ownDepthCache: number | undefined;

  constructor(path: string, procRoot = '/proc') {
    this.path = path;
    this.#procRoot = procRoot;
  }

  /**
   * The cgroup of a running container whose init has host pid `pid`; null when that cannot be
   * seen from here (a remote engine, another pid namespace) or the host has no cgroup v2.
   */
  static async ofProcess(mount: string, pid: number): Promise<ContainerCgroup | null> {
    const text = await readFile(`/proc/${pid}/cgroup`, 'utf8').catch(() => null);
    const relative = text === null ? null : parseUnifiedCgroupPath(text);
    if (relative === null || relative === '/') return null;
    const path = join(mount, relative);
    // The directory must exist and list the init: a pid from another pid namespace would not.
    const procs = await readFile(join(path, 'cgroup.procs'), 'utf8').catch(() => null);
    return procs !== null && parsePids(procs).includes(pid) ? new ContainerCgroup(path) : null;
  }

  /** Makes (or reuses) the child cgroup `name` and returns its path. */
  async createChild(name: string): Promise<string> {
    const child = join(this.path, name);
    await mkdir(child).catch((error: NodeJS.ErrnoException) => {
      if (error.code !== 'EEXIST') throw error;
    });
    return child;
  }

  /**
   * The host pid of the process of this container whose pid in the container's pid namespace is
   * `nsPid` (from the `NSpid` line of /proc/PID/status), among those directly in the container's
   * cgroup; null when none is.
   *
   * On a one-shot exec's path between the helper's ready token and its go byte, so the reads are
   * synchronous: these are procfs and cgroupfs files the kernel makes from memory, never a disk,
   * and the asynchronous reads they replaced cost four thread-pool hops a file (about 8 ms an
   * exec on a loaded host). A container the agent filled with processes would hold the event
   * loop that long, so the scan yields every {@link SCAN_BATCH} of them. The newest process is
   * looked at first (the helper has just started), but a match ends the scan only at the
   * shallowest pid-namespace depth a process of the container can have: a process in a pid
   * namespace nested in the container's (an agent with CAP_SYS_ADMIN can make one) may have the
   * same last NSpid, and is never taken for the container's own.
   */
  async hostPidOf(nsPid: number): Promise<number | null> {
    // A process of the container is in a pid namespace below the daemon's: at least one level deeper.
    const shallowest = this.#ownDepth() + 1;
    let found: { pid: number; depth: number } | null = null;
    const pids = this.procsNow(this.path);
    for (let index = pids.length - 1; index >= 0; index -= 1) {
      if ((pids.length - 1 - index) % SCAN_BATCH === SCAN_BATCH - 1) await new Promise(setImmediate);
      const pid = pids[index]!;
      const levels = nsPidLevels(readOrEmpty(`${this.#procRoot}/${pid}/status`));
      if (levels === null || levels.length < shallowest || levels.at(-1) !== nsPid) continue;
      if (found === null || levels.length < found.depth) found = { pid, depth: levels.length };
      if (found.depth === shallowest) break;
    }
    return found?.pid ?? null;
  }

  /** How many pid namespaces deep this process is (1 in the host's). */
  #ownDepth(): number {
    this.#ownDepthCache ??= nsPidLevels(readOrEmpty(`${this.#procRoot}/self/status`))?.length ?? 1;
    return this.#ownDepthCache;
  }

  /**
   * Moves one process (with all its threads) into `cgroup`.
   *
   * The kernel takes its global threadgroup lock for writing, and when no move has happened for
   * a while that first waits for an RCU grace period: measured on a loaded 2-core cgroup v1
   * (hybrid) host, about 12 ms for a move after 50 ms of quiet, 0.05 ms for one right after
   * another. It is most of what confining a one-shot exec adds to it, and not ours to remove: a
   * host that mounts cgroup2 with `favordynmods` (Linux 6.0+) trades it for slightly slower forks
   * and exits.
   */
  async move(pid: number, cgroup: string): Promise<void> {
    // Opened and closed on the event loop (a cgroupfs open or close never waits), written on the
    // thread pool: the write can wait in the kernel (above), and one hop there instead
    // of three keeps a loaded host from adding its queueing to every exec's start.
    const descriptor = openSync(join(cgroup, 'cgroup.procs'), 'w');
    try {
      await new Promise<void>((resolve, reject) =>
        write(descriptor, `${pid}\n`, (error) => (error === null ? resolve() : reject(error))),
      );
    } finally {
      closeSync(descriptor);
    }
  }

  /** The processes directly in `cgroup` (sync: a small procfs-like read on the session hot path). */
  procsNow(cgroup: string): number[] {
    try {
      return parsePids(readFileSync(join(cgroup, 'cgroup.procs'), 'utf8'));
    } catch {
      return [];
    }
  }

  /**
   * Moves every process of `cgroup` but `keep` up to the container's own cgroup, so a later kill
   * of `cgroup` spares them. Repeats while a moved job forks (bounded).
   */
  async evacuate(cgroup: string, keep: ReadonlySet<number> = new Set()): Promise<void> {
    for (let pass = 0; pass < 5; pass += 1) {
      const leftovers = this.procsNow(cgroup).filter((pid) => !keep.has(pid));
      if (leftovers.length === 0) return;
      // A process that exits meanwhile cannot be moved (ESRCH): nothing to do for it.
      await Promise.all(leftovers.map((pid) => this.move(pid, this.path).catch(() => {})));
    }
  }

  /**
   * Kills everything in `cgroup` (and below) at once, and waits (bounded) until it is empty. A
   * kernel without `cgroup.kill` (before 5.14) gets the same from freeze, SIGKILL each, thaw.
   * @throws when the cgroup could not be emptied.
   */
  async kill(cgroup: string): Promise<void> {
    try {
      await writeFile(join(cgroup, 'cgroup.kill'), '1');
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'ENOENT') throw error;
      await this.#freezeAndKill(cgroup);
    }
    if (!(await this.#waitForEvent(cgroup, 'populated 0')))
      throw new Error(`processes were still in ${cgroup} after the kill`);
  }

  async #freezeAndKill(cgroup: string): Promise<void> {
    await writeFile(join(cgroup, 'cgroup.freeze'), '1');
    try {
      if (!(await this.#waitForEvent(cgroup, 'frozen 1'))) throw new Error(`${cgroup} did not freeze`);
      for (const pid of await allProcsBelow(cgroup)) {
        try {
          process.kill(pid, 'SIGKILL');
        } catch {
          // Already gone.
        }
      }
    } finally {
      await writeFile(join(cgroup, 'cgroup.freeze'), '0').catch(() => {});
    }
  }

  /** Removes an empty child cgroup; a busy or missing one is left to the container's removal. */
  async remove(cgroup: string): Promise<void> {
    await rmdir(cgroup).catch(() => {});
  }

  /**
   * Freezes the whole container (children included) and waits until it is frozen: while frozen
   * no process runs or forks, though a SIGKILL still ends one.
   */
  async freeze(): Promise<void> {
    await writeFile(join(this.path, 'cgroup.freeze'), '1');
    if (!(await this.#waitForEvent(this.path, 'frozen 1'))) {
      await this.thaw().catch(() => {});
      throw new Error(`the container's cgroup did not freeze within ${SETTLE_TIMEOUT_MS} ms`);
    }
  }

  async thaw(): Promise<void> {
    await writeFile(join(this.path, 'cgroup.freeze'), '0');
  }

  /** Every process in the container's cgroup and all cgroups below it. */
  allProcs(): Promise<number[]> {
    return allProcsBelow(this.path);
  }

  /** Whether `cgroup.events` showed `line` within the settle time (a cgroup gone counts as settled). */
  async #waitForEvent(cgroup: string, line: string): Promise<boolean> {
    const deadline = performance.now() + SETTLE_TIMEOUT_MS;
    while (performance.now() < deadline) {
      const events = await readFile(join(cgroup, 'cgroup.events'), 'utf8').catch(() => null);
      if (events === null || events.split('\n').includes(line)) return true;
      await delay(SETTLE_POLL_MS);
    }
    return false;
  }
}

/** Every process in `directory` and all cgroups below it. */
async function allProcsBelow(directory: string): Promise<number[]> {
  const pids: number[] = [];
  const visit = async (current: string): Promise<void> => {
    pids.push(...parsePids(await readFile(join(current, 'cgroup.procs'), 'utf8').catch(() => '')));
    const entries = await readdir(current, { withFileTypes: true }).catch(() => []);
    await Promise.all(
      entries.filter((entry) => entry.isDirectory()).map((entry) => visit(join(current, entry.name))),
    );
  };
  await visit(directory);
  return pids;
}
