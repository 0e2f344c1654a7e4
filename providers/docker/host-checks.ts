/**
 * The Docker provider's checks of the daemon's host for `gym doctor`: the exec helper (a
 * timed-out command's every process killed through its cgroup) and, with gateway reach, what the
 * relay needs to enter a sandbox's network namespace (nsenter, as root). Loads no dockerode.
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

function readProcStatus(): string | undefined {
  try {
    return readFileSync('/proc/self/status', 'utf8');
  } catch {
    return undefined;
  }
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
  if (options.gatewayReach === false) return checks;
  // The gateway relay enters each sandbox's network namespace: nsenter, as root.
  const nsenter = findOnPath('nsenter', env.PATH);
  checks.push({
    name: 'nsenter (gateway relay)',
    ok: nsenter !== undefined,
    detail: nsenter ?? 'not on PATH',
    fix: 'apt-get install util-linux',
  });
  const privilege = relayPrivilege(process.getuid?.(), readProcStatus());
  checks.push({
    name: 'privileges (gateway relay)',
    ok: privilege.ok,
    detail: privilege.detail,
    fix: 'run gym as root (or with CAP_SYS_ADMIN and CAP_SYS_PTRACE); without them sandboxes get no model gateway',
  });
  return checks;
}
