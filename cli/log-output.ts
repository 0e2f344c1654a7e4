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
 * What a terminal would act on rather than show: control characters (C0, DEL and C1, whose
 * 0x9b starts an escape sequence as ESC [ does), the Unicode line and paragraph separators, and
 * the bidirectional overrides and isolates that reorder the text around them.
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is escaped.
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;
const SHORT_ESCAPES: Readonly<Record<string, string>> = { '\n': '\\n', '\r': '\\r', '\t': '\\t' };

/**
 * Text from a log record made printable on one line, escaped as the JSON log escapes it (`\n`,
 * `\u001b`): log fields carry text an agent wrote (a verifier's error quoting `reward.json`, a
 * command's output), which must not start lines that look like ours nor drive the terminal.
 */
export function printableLogText(text: string): string {
  return text.replace(
    UNPRINTABLE,
    (character) => SHORT_ESCAPES[character] ?? `\\u${character.charCodeAt(0).toString(16).padStart(4, '0')}`,
  );
}

/**
 * One pino JSON line as a person reads it: `gym: warning: infra error; retrying (task 3, rollout
 * 0, reason: ...)`. A line that is not JSON is shown as text, escaped as fields are.
 */
export function readableLogLine(line: string): string {
  let record: Record<string, unknown>;
  try {
    record = JSON.parse(line) as Record<string, unknown>;
  } catch {
    return `${printableLogText(line.endsWith('\n') ? line.slice(0, -1) : line)}\n`;
  }
  const level = LEVEL_NAMES[Number(record.level)] ?? String(record.level ?? 'log');
  const fields = Object.entries(record)
    .filter(([key, value]) => !PLUMBING.has(key) && value !== undefined)
    .map(([key, value]) => `${key} ${typeof value === 'string' ? value : JSON.stringify(value)}`);
  const message = typeof record.msg === 'string' ? record.msg : '';
  const text = `${level}: ${message}${fields.length > 0 ? ` (${fields.join(', ')})` : ''}`;
  return `gym: ${printableLogText(text)}\n`;
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
