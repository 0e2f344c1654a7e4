/**
 * What `gym doctor` checks of this host besides Docker: the tools the daemon runs and the
 * privileges it needs. Pure functions of what they read (the PATH, /proc/self/status), so they
 * are tested on text rather than on the machine the tests run on.
 */
import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';

/** Linux capability numbers (linux/capability.h) the gateway relay needs to enter a namespace. */
export const CAP_SYS_PTRACE = 19;
export const CAP_SYS_ADMIN = 21;

function isExecutableFile(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return statSync(path).isFile();
  } catch {
    return false;
  }
}

/** The first executable file called `name` on `pathVariable` (a PATH value), or undefined. */
export function findOnPath(name: string, pathVariable: string | undefined): string | undefined {
  for (const directory of (pathVariable ?? '').split(delimiter)) {
    if (directory === '') continue;
    const candidate = join(directory, name);
    if (isExecutableFile(candidate)) return candidate;
  }
  return undefined;
}

/** The effective capability set from the text of /proc/PID/status, or undefined if it has none. */
export function effectiveCapabilities(procStatus: string): bigint | undefined {
  const match = /^CapEff:\s*([0-9a-fA-F]+)\s*$/m.exec(procStatus);
  return match === null ? undefined : BigInt(`0x${match[1]}`);
}

export function hasCapability(capabilities: bigint, capability: number): boolean {
  return (capabilities & (1n << BigInt(capability))) !== 0n;
}

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
