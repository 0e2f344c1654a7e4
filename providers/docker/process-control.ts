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

export class ProcessControl {
  readonly host: HostControl;
  readonly #logger: Logger;
  /** Each sandbox's confinement (null: that container cannot be confined), found on first use. */
  readonly #confinements = new Map<string, Promise<ExecConfinement | null>>();

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

  forget(id: string): void {
    this.#confinements.delete(id);
  }

  async #find(id: string, container: Docker.Container): Promise<ExecConfinement | null> {
    if (this.host.mode !== 'cgroup') return null;
    const inspected = await container.inspect();
    // A container made before the helper was built, or by an older daemon, has no helper.
    const hasHelper = (inspected.Mounts ?? []).some((mount) => mount.Destination === EXEC_HELPER_MOUNT);
    const cgroup = inspected.State.Pid
      ? await ContainerCgroup.ofProcess(this.host.cgroupMount, inspected.State.Pid)
      : null;
    if (!hasHelper || cgroup === null) {
      this.#logger.warn(
        { sandboxId: id, hasHelper, hasCgroup: cgroup !== null },
        'this sandbox cannot be confined from the host: its timeouts use the kill script inside it',
      );
      return null;
    }
    return { helperPath: EXEC_HELPER_MOUNT, cgroup };
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
  async stopProcesses(container: Docker.Container): Promise<number> {
    if (this.host.mode !== 'cgroup') throw new Error('no cgroup v2 control of this host');
    const inspected = await container.inspect();
    const initPid = inspected.State.Pid;
    if (!initPid) throw new Error('the container is not running');
    const cgroup = await ContainerCgroup.ofProcess(this.host.cgroupMount, initPid);
    if (cgroup === null) throw new Error('the container has no cgroup v2 directory this daemon can reach');
    const isHelperKeeper = inspected.Config.Entrypoint?.[0] === EXEC_HELPER_MOUNT;
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
