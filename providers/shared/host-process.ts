/**
 * A sandbox seen from the host it runs on, through its keeper process (its PID 1) in the host's
 * /proc and the memory cgroup around it: whether it still runs and how often the OOM killer
 * struck in it. Nothing of the sandbox's own (its `sh`, which an agent may delete) is trusted for
 * it. Any backend whose daemon shares a host with the sandbox's processes can use it.
 */
import { readFile } from 'node:fs/promises';
import type { OutsideView } from './abnormal-end.ts';
import { parseOomKillCount } from './exec-output.ts';
import { parseProcessState } from './proc-stat.ts';

/** Where cgroup v1's memory controller is mounted on hosts that still use it (hybrid hosts). */
export const CGROUP1_MEMORY_MOUNT = '/sys/fs/cgroup/memory';

/**
 * The OOM-kill counter of a process's memory cgroup, from `/proc/PID/cgroup`: cgroup v2's
 * `memory.events` under the unified mount, else cgroup v1's `memory.oom_control`.
 */
export function memoryCounterPaths(
  procCgroup: string,
  cgroup2Mount: string,
  cgroup1MemoryMount: string,
): string[] {
  const paths: string[] = [];
  for (const line of procCgroup.split('\n')) {
    const [, controllers, path] = /^\d+:([^:]*):(.*)$/.exec(line) ?? [];
    if (path === undefined || !path.startsWith('/') || path.split('/').includes('..')) continue;
    if (controllers === '') paths.push(`${cgroup2Mount}${path}/memory.events`);
    else if (controllers!.split(',').includes('memory'))
      paths.push(`${cgroup1MemoryMount}${path}/memory.oom_control`);
  }
  return paths;
}

/** The view through host pid `pid` (the sandbox's keeper): not alive once it is gone or a zombie. */
export async function viewThroughHostPid(
  pid: number,
  cgroup2Mount: string,
  cgroup1MemoryMount = CGROUP1_MEMORY_MOUNT,
): Promise<OutsideView> {
  const [stat, procCgroup] = await Promise.all([
    readFile(`/proc/${pid}/stat`, 'utf8').catch(() => null),
    readFile(`/proc/${pid}/cgroup`, 'utf8').catch(() => null),
  ]);
  const state = stat === null ? null : parseProcessState(stat);
  if (state === null || state === 'Z' || state === 'X' || procCgroup === null)
    return { isAlive: false, oomKills: null };
  for (const path of memoryCounterPaths(procCgroup, cgroup2Mount, cgroup1MemoryMount)) {
    const text = await readFile(path, 'utf8').catch(() => null);
    const count = text === null ? null : parseOomKillCount(text);
    if (count !== null) return { isAlive: true, oomKills: count };
  }
  return { isAlive: true, oomKills: null };
}
