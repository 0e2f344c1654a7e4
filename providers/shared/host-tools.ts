/**
 * Reading the daemon's host for `gym doctor`'s provider checks (`../host-checks.ts`): tools on the
 * PATH, files that must be executable, the process's capabilities. Pure functions of what they
 * read (the PATH, the text of /proc/self/status), so they are tested on text rather than on the
 * machine the tests run on.
 */
import { accessSync, constants, statSync } from 'node:fs';
import { delimiter, join } from 'node:path';

/** Whether `path` is a file this process may execute. */
export function isExecutableFile(path: string): boolean {
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
