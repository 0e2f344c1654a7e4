/**
 * The Docker provider's checks of the daemon's host for `gym doctor`: the exec helper (a
 * timed-out command's every process killed through its cgroup) and, with gateway reach, what the
 * relay needs to enter a sandbox's network namespace (nsenter, as root); and whether the cgroup2
 * mount makes a one-shot exec's cgroup move cheap (`favordynmods`). Loads no dockerode.
 */
import { readFileSync } from 'node:fs';
import type { HostCheck, HostCheckContext } from '../../core/host-check.ts';
import { effectiveCapabilities, findOnPath, hasCapability, isExecutableFile } from '../shared/host-tools.ts';
import { DEFAULT_EXEC_HELPER_PATH } from './process-control.ts';

/** Linux capability numbers (linux/capability.h) the gateway relay needs to enter a namespace. */
export const CAP_SYS_PTRACE = 19;
export const CAP_SYS_ADMIN = 21;

export interface RelayPrivilege {
  ok: boolean;
  detail: string;
}

/**
 * Whether a process with this uid and status may start the gateway relay: it enters a sandbox's
 * network namespace with nsenter, which takes CAP_SYS_ADMIN (setns) and CAP_SYS_PTRACE (another
 * user's /proc/PID/ns). Root in the initial user namespace has both; so may a process granted them.
 */
export function relayPrivilege(uid: number | undefined, procStatus: string | undefined): RelayPrivilege {
  const capabilities = procStatus === undefined ? undefined : effectiveCapabilities(procStatus);
  if (capabilities === undefined) {
    return uid === 0
      ? { ok: true, detail: 'root (capabilities not readable)' }
      : { ok: false, detail: `uid ${uid ?? 'unknown'}, capabilities not readable` };
  }
  const missing = [
    ['CAP_SYS_ADMIN', CAP_SYS_ADMIN],
    ['CAP_SYS_PTRACE', CAP_SYS_PTRACE],
  ].filter(([, capability]) => !hasCapability(capabilities, capability as number));
  const who = uid === 0 ? 'root' : `uid ${uid ?? 'unknown'}`;
  return missing.length === 0
    ? { ok: true, detail: `${who} with CAP_SYS_ADMIN and CAP_SYS_PTRACE` }
    : { ok: false, detail: `${who} lacks ${missing.map(([name]) => name).join(' and ')}` };
}

function readProcFile(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch {
    return undefined;
  }
}

/** The host's cgroup2 mount, from `/proc/self/mountinfo`, and whether its superblock has `favordynmods`. */
export function cgroup2Mount(mountinfo: string): { path: string; favordynmods: boolean } | null {
  for (const line of mountinfo.split('\n')) {
    const [mount, filesystem] = line.split(' - ');
    const [type, , superOptions = ''] = filesystem?.split(' ') ?? [];
    const path = mount?.split(' ')[4];
    if (type !== 'cgroup2' || path === undefined) continue;
    return {
      path: path.replace(/\\040/g, ' '),
      favordynmods: superOptions.split(',').includes('favordynmods'),
    };
  }
  return null;
}

/**
 * A warning, not a failure: each one-shot exec moves its command into a cgroup of its own, and
 * without `favordynmods` a write to `cgroup.procs` waits for an RCU grace period of the kernel
 * (measured here: ~12 ms of every one-shot exec, docs/benchmarks.md). None without a cgroup2 mount.
 */
export function favordynmodsCheck(mountinfo: string | undefined): HostCheck | null {
  const mount = mountinfo === undefined ? null : cgroup2Mount(mountinfo);
  if (mount === null) return null;
  return {
    name: 'cgroup2 favordynmods (one-shot exec)',
    ok: mount.favordynmods,
    required: false,
    detail: mount.favordynmods
      ? `${mount.path} is mounted with favordynmods`
      : `${mount.path} is mounted without favordynmods: moving each one-shot exec into its cgroup waits for the kernel, ~12 ms per exec`,
    fix: `mount -o remount,favordynmods ${mount.path} (as root, Linux 6.0 or later; bash scripts/setup.sh tries it)`,
  };
}

/** The checks, for the provider's options as configured (`execHelperPath`, `gatewayReach`). */
export async function dockerHostChecks({ options, env }: HostCheckContext): Promise<HostCheck[]> {
  const helperPath =
    typeof options.execHelperPath === 'string' ? options.execHelperPath : DEFAULT_EXEC_HELPER_PATH;
  const checks: HostCheck[] = [
    {
      name: 'exec helper',
      ok: isExecutableFile(helperPath),
      detail: `${helperPath} (kills a timed-out command's every process through its cgroup)`,
      fix: 'bash scripts/setup.sh (compiles it; needs gcc and libc6-dev)',
    },
  ];
  const favordynmods = favordynmodsCheck(readProcFile('/proc/self/mountinfo'));
  if (favordynmods !== null) checks.push(favordynmods);
  if (options.gatewayReach === false) return checks;
  // The gateway relay enters each sandbox's network namespace: nsenter, as root.
  const nsenter = findOnPath('nsenter', env.PATH);
  checks.push({
    name: 'nsenter (gateway relay)',
    ok: nsenter !== undefined,
    detail: nsenter ?? 'not on PATH',
    fix: 'apt-get install util-linux',
  });
  const privilege = relayPrivilege(process.getuid?.(), readProcFile('/proc/self/status'));
  checks.push({
    name: 'privileges (gateway relay)',
    ok: privilege.ok,
    detail: privilege.detail,
    fix: 'run gym as root (or with CAP_SYS_ADMIN and CAP_SYS_PTRACE); without them sandboxes get no model gateway',
  });
  return checks;
}
