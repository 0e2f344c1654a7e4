/**
 * Control over a container's processes from the host: per-exec cgroups for timeouts, and
 * stopping every process but the container's keeper before a verifier runs.
 *
 * Both need the daemon beside the engine, as root, on a host with cgroup v2 (`exec-cgroups.ts`),
 * and timeouts need the exec helper built (`exec-helper/gym-exec.c`). Without them, timeouts fall
 * back to the kill script inside the sandbox and `stopProcesses` is not offered.
 */
import { accessSync, constants, existsSync, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type Docker from 'dockerode';
import type { Logger } from '../../core/logger.ts';
import type { OutsideView } from '../shared/abnormal-end.ts';
import { viewThroughHostPid } from '../shared/host-process.ts';
import { parseParentPid, parseStartTime } from '../shared/proc-stat.ts';
import { ContainerCgroup, hostCgroup2Mount } from './exec-cgroups.ts';
import { EXEC_HELPER_MOUNT, type ExecConfinement } from './one-shot-exec.ts';

/**
 * Where scripts/setup.sh builds the exec helper: `.tools/` of the checkout, seen from this module
 * in the sources (`providers/docker/`) or in the build (`dist/providers/docker/`).
 */
export const DEFAULT_EXEC_HELPER_PATH = ['../../.tools/gym-exec', '../../../.tools/gym-exec']
  .map((relative) => fileURLToPath(new URL(relative, import.meta.url)))
  .reduce((found, candidate) => (existsSync(found) ? found : existsSync(candidate) ? candidate : found));

/** How long `stopProcesses` waits for the processes it killed to be gone. */
const STOP_WAIT_MS = 5_000;

export type HostControl =
  | { mode: 'cgroup'; cgroupMount: string; helperPath: string }
  | { mode: 'tagged'; reason: string };

/** Whether this daemon can confine a container's processes from the host, and if not, why. */
export function detectHostControl(options: { helperPath: string; isEngineLocal: boolean }): HostControl {
  if (!options.isEngineLocal)
    return { mode: 'tagged', reason: 'the engine is not reached through a local unix socket' };
  if (process.getuid?.() !== 0) return { mode: 'tagged', reason: 'the daemon does not run as root' };
  const cgroupMount = hostCgroup2Mount();
  if (cgroupMount === null) return { mode: 'tagged', reason: 'the host has no cgroup v2 hierarchy' };
  try {
    accessSync(options.helperPath, constants.X_OK);
    if (!statSync(options.helperPath).isFile()) throw new Error('not a file');
  } catch {
    return {
      mode: 'tagged',
      reason: `the exec helper ${options.helperPath} is missing (scripts/setup.sh builds it)`,
    };
  }
  return { mode: 'cgroup', cgroupMount, helperPath: options.helperPath };
}

/** What the host knows of a running container: enough to confine its commands and to stop them. */
interface ContainerView {
  initPid: number;
  cgroup: ContainerCgroup;
  /** PID 1 is the exec helper's keeper (it alone stays when the processes are stopped). */
  isHelperKeeper: boolean;
  hasHelper: boolean;
}

export class ProcessControl {
  readonly host: HostControl;
  readonly #logger: Logger;
  /** Each sandbox's confinement (null: that container cannot be confined), found on first use. */
  readonly #confinements = new Map<string, Promise<ExecConfinement | null>>();
  /** What the confinement lookup saw of each sandbox's container, so stopping need not ask the engine again. */
  readonly #views = new Map<string, ContainerView>();
  /**
   * The engine's cgroup v2 path of a container, relative to the mount, split around the
   * container's id (`/docker/` and `` with cgroupfs, `/system.slice/docker-` and `.scope` with
   * systemd): learned from the first container inspected, so the containers this provider makes
   * afterwards are found on the host without asking the engine.
   */
  #cgroupLayout: { before: string; after: string } | null = null;
  /** Containers this provider created with the helper mounted and its keeper as PID 1, by sandbox id. */
  readonly #created = new Map<string, string>();

  constructor(host: HostControl, logger: Logger) {
    this.host = host;
    this.#logger = logger;
    if (host.mode === 'tagged') {
      logger.warn(
        { reason: host.reason },
        'timed-out commands are killed from inside the sandbox (weaker: a command that clears its environment and leaves its session, or replaces /bin/sh, can survive)',
      );
    }
  }

  /** The bind that mounts the exec helper into a new container, when commands are confined. */
  get helperBind(): string | null {
    return this.host.mode === 'cgroup' ? `${this.host.helperPath}:${EXEC_HELPER_MOUNT}:ro` : null;
  }

  /** The sandbox's confinement, or null when its commands fall back to the kill script. */
  confinement(id: string, container: Docker.Container): Promise<ExecConfinement | null> {
    let found = this.#confinements.get(id);
    if (found === undefined) {
      found = this.#find(id, container);
      this.#confinements.set(id, found);
      // A failed inspect (the sandbox is starting or gone) is asked again next time.
      found
        .then((value) => value === null && this.#confinements.delete(id))
        .catch(() => this.#confinements.delete(id));
    }
    return found;
  }

  /**
   * Notes a container this provider has just created and started with the helper mounted and its
   * keeper as PID 1 (`containerId`: the engine's full id), so its first command can find the
   * container's cgroup on the host instead of inspecting it.
   */
  created(id: string, containerId: string): void {
    if (this.host.mode === 'cgroup' && /^[0-9a-f]{64}$/.test(containerId)) this.#created.set(id, containerId);
  }

  forget(id: string): void {
    this.#confinements.delete(id);
    this.#views.delete(id);
    this.#created.delete(id);
  }

  async #find(id: string, container: Docker.Container): Promise<ExecConfinement | null> {
    if (this.host.mode !== 'cgroup') return null;
    const view = (await this.#viewOfCreated(id)) ?? (await this.#inspectView(container));
    if (view === null || !view.hasHelper) {
      this.#logger.warn(
        { sandboxId: id, hasHelper: view?.hasHelper ?? null, hasCgroup: view !== null },
        'this sandbox cannot be confined from the host: its timeouts use the kill script inside it',
      );
      return null;
    }
    this.#views.set(id, view);
    return { helperPath: EXEC_HELPER_MOUNT, cgroup: view.cgroup };
  }

  /**
   * A container this provider created, found on the host alone: its cgroup directory by the
   * layout the engine used for earlier ones, and its init as the process there that is PID 1 in
   * the container's pid namespace. Only the engine makes a directory named by a container's id
   * (a container's own cgroupfs is read-only), so this is the container. Null when the layout is
   * not known yet or does not hold (the caller inspects then).
   */
  async #viewOfCreated(id: string): Promise<ContainerView | null> {
    const containerId = this.#created.get(id);
    this.#created.delete(id);
    if (this.host.mode !== 'cgroup' || containerId === undefined || this.#cgroupLayout === null) return null;
    const { before, after } = this.#cgroupLayout;
    const cgroup = new ContainerCgroup(join(this.host.cgroupMount, `${before}${containerId}${after}`));
    const initPid = await cgroup.hostPidOf(1);
    if (initPid === null) return null;
    return { initPid, cgroup, isHelperKeeper: true, hasHelper: true };
  }

  /** The engine's view of a running container (one inspect); null when it runs no process we can reach. */
  async #inspectView(container: Docker.Container): Promise<ContainerView | null> {
    return this.#viewOf(await container.inspect());
  }

  async #viewOf(inspected: Docker.ContainerInspectInfo): Promise<ContainerView | null> {
    if (this.host.mode !== 'cgroup') return null;
    const initPid = inspected.State.Pid;
    const cgroup = initPid ? await ContainerCgroup.ofProcess(this.host.cgroupMount, initPid) : null;
    if (cgroup === null) return null;
    this.#learnLayout(cgroup.path, inspected.Id);
    return {
      initPid,
      cgroup,
      isHelperKeeper: inspected.Config.Entrypoint?.[0] === EXEC_HELPER_MOUNT,
      // A container made before the helper was built, or by an older daemon, has no helper.
      hasHelper: (inspected.Mounts ?? []).some((mount) => mount.Destination === EXEC_HELPER_MOUNT),
    };
  }

  #learnLayout(path: string, containerId: string): void {
    if (this.#cgroupLayout !== null || this.host.mode !== 'cgroup') return;
    const relative = path.slice(this.host.cgroupMount.length);
    const at = relative.indexOf(containerId);
    if (!/^[0-9a-f]{64}$/.test(containerId) || at === -1 || relative.indexOf(containerId, at + 1) !== -1)
      return;
    this.#cgroupLayout = { before: relative.slice(0, at), after: relative.slice(at + containerId.length) };
  }

  /**
   * Whether a container still runs, and its OOM-kill count, read on the host: nothing of the
   * sandbox's own (its `sh`, which an agent may delete) is trusted for it. The container runs
   * while its PID 1 lives (the keeper cannot be killed from inside); null when this host has no
   * such view (no cgroup control).
   */
  async hostView(container: Docker.Container): Promise<OutsideView | null> {
    if (this.host.mode !== 'cgroup') return null;
    let pid: number;
    try {
      const inspected = await container.inspect();
      if (!inspected.State.Running || !inspected.State.Pid) return { isAlive: false, oomKills: null };
      pid = inspected.State.Pid;
    } catch (error) {
      if ((error as { statusCode?: number }).statusCode === 404) return { isAlive: false, oomKills: null };
      throw error;
    }
    return viewThroughHostPid(pid, this.host.cgroupMount);
  }

  /**
   * Kills every process of a container except its keeper, with the container frozen so nothing
   * forks meanwhile. A container started with the helper's keeper as PID 1 keeps that alone, and
   * afterwards nothing else may run in it. An older container (tini and a shell loop) keeps the
   * init and the init's child that started first (no process the agent makes can have started
   * before it); its loop runs the sandbox's own `sleep`, so there this is weaker.
   * @returns how many processes were killed.
   */
  async stopProcesses(id: string, container: Docker.Container): Promise<number> {
    if (this.host.mode !== 'cgroup') throw new Error('no cgroup v2 control of this host');
    // What the confinement lookup saw holds while the init still runs in that cgroup (a container
    // is never restarted); otherwise the engine is asked.
    const known = this.#views.get(id);
    const view = known?.cgroup.procsNow(known.cgroup.path).includes(known.initPid)
      ? known
      : await this.#inspectStopView(container);
    const { initPid, cgroup, isHelperKeeper } = view;
    // One round suffices: nothing forks while the container is frozen, and a process killed then
    // never runs again.
    const victims: number[] = [];
    await cgroup.freeze();
    try {
      const pids = await cgroup.allProcs();
      const keep = isHelperKeeper ? new Set([initPid]) : await this.#keepers(initPid, pids);
      for (const pid of pids) {
        if (keep.has(pid)) continue;
        try {
          process.kill(pid, 'SIGKILL');
          victims.push(pid);
        } catch {
          // Already gone.
        }
      }
    } finally {
      await cgroup.thaw();
    }
    // Return only once they are gone (reaped by the init), so the caller sees a quiet sandbox.
    const deadline = performance.now() + STOP_WAIT_MS;
    for (;;) {
      const present = new Set(await cgroup.allProcs());
      const left = victims.filter((pid) => present.has(pid));
      if (left.length === 0) {
        // The helper's keeper never forks: anything but it now is a process we did not stop.
        const others = [...present].filter((pid) => pid !== initPid);
        if (isHelperKeeper && others.length > 0)
          throw new Error(
            `${others.length} processes run in the sandbox after stopping every one but its keeper`,
          );
        return victims.length;
      }
      if (performance.now() > deadline)
        throw new Error(
          `${left.length} killed processes were still in the container after ${STOP_WAIT_MS} ms`,
        );
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
  }

  async #inspectStopView(container: Docker.Container): Promise<ContainerView> {
    const inspected = await container.inspect();
    if (!inspected.State.Pid) throw new Error('the container is not running');
    const view = await this.#viewOf(inspected);
    if (view === null) throw new Error('the container has no cgroup v2 directory this daemon can reach');
    return view;
  }

  /** The init, and its child with the earliest start time (the keeper the container started with). */
  async #keepers(initPid: number, pids: number[]): Promise<Set<number>> {
    const keep = new Set([initPid]);
    let keeper: { pid: number; start: number } | null = null;
    for (const pid of pids) {
      if (pid === initPid) continue;
      const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null);
      if (stat === null || parseParentPid(stat) !== initPid) continue;
      const start = parseStartTime(stat);
      if (start !== null && (keeper === null || start < keeper.start)) keeper = { pid, start };
    }
    if (keeper !== null) keep.add(keeper.pid);
    return keep;
  }
}
