/**
 * Fields of `/proc/PID/stat` (proc(5)), numbered as the manual numbers them. The command name
 * (field 2) is in parentheses and may hold spaces and parentheses itself, so fields are counted
 * from after its last `)`.
 */

/** Field `number` (3 or more) of a `/proc/PID/stat` line, or undefined past its end. */
export function procStatField(stat: string, number: number): string | undefined {
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[number - 3];
}

/** Field 3: the one-letter state (R, S, D, Z, X, ...). */
export function parseProcessState(stat: string): string | null {
  return procStatField(stat, 3) ?? null;
}

/** Field 4: the parent's pid. */
export function parseParentPid(stat: string): number | null {
  const value = Number(procStatField(stat, 4));
  return Number.isFinite(value) ? value : null;
}

/** Field 22: when the process started, in clock ticks after boot (with the pid, one process for good). */
export function parseStartTime(stat: string): number | null {
  const value = Number(procStatField(stat, 22));
  return Number.isSafeInteger(value) ? value : null;
}
