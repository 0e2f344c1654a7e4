/**
 * The logs of a CLI command (and of the daemon it runs in-process) on its stderr: readable lines
 * by default, beside the command's own progress lines; pino's JSON lines only when asked
 * (`GYM_LOG_FORMAT=json`), for a machine that collects them. `gym daemon start` keeps JSON: a
 * server's logs are read by machines.
 */
import { pino } from 'pino';
import type { Logger } from '../core/logger.ts';

/** pino's numeric levels, by name. */
const LEVEL_NAMES: Readonly<Record<number, string>> = {
  10: 'trace',
  20: 'debug',
  30: 'info',
  40: 'warning',
  50: 'error',
  60: 'fatal',
};

/** Fields every pino line carries that say nothing to a person reading a command's output. */
const PLUMBING = new Set(['level', 'time', 'pid', 'hostname', 'msg']);

/**
 * One pino JSON line as a person reads it: `gym: warning: infra error; retrying (task 3, rollout
 * 0, reason: ...)`. A line that is not JSON is passed through as it is.
 */
export function readableLogLine(line: string): string {
  let record: Record<string, unknown>;
  try {
    record = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return line.endsWith('\n') ? line : `${line}\n`;
  }
  const level = LEVEL_NAMES[Number(record.level)] ?? String(record.level ?? 'log');
  const fields = Object.entries(record)
    .filter(([key, value]) => !PLUMBING.has(key) && value !== undefined)
    .map(([key, value]) => `${key} ${typeof value === 'string' ? value : JSON.stringify(value)}`);
  const message = typeof record.msg === 'string' ? record.msg : '';
  return `gym: ${level}: ${message}${fields.length > 0 ? ` (${fields.join(', ')})` : ''}\n`;
}

/**
 * A logger for a command: JSON lines when `GYM_LOG_FORMAT=json`, else readable ones. On a
 * terminal a line first clears the progress bar being redrawn there (the bar comes back at its
 * next redraw).
 */
export function commandLogger(
  env: Readonly<Record<string, string | undefined>>,
  stderr: NodeJS.WritableStream & { isTTY?: boolean },
  defaultLevel = 'warn',
): Logger & ReturnType<typeof pino> {
  const level = env.GYM_LOG_LEVEL ?? defaultLevel;
  const destination =
    env.GYM_LOG_FORMAT === 'json'
      ? { write: (line: string) => stderr.write(line) }
      : {
          write: (line: string) =>
            stderr.write(`${stderr.isTTY === true ? '\r\x1b[2K' : ''}${readableLogLine(line)}`),
        };
  return pino({ level }, destination) as unknown as Logger & ReturnType<typeof pino>;
}
