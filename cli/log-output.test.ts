import { describe, expect, it } from 'vitest';
import { commandLogger, readableLogLine } from './log-output.ts';

/** A command's stderr, as the readable logger writes to it. */
function capture(isTTY = false): { stream: NodeJS.WritableStream & { isTTY?: boolean }; text: () => string } {
  const chunks: string[] = [];
  const stream = {
    isTTY,
    write(chunk: string) {
      chunks.push(chunk);
      return true;
    },
  } as unknown as NodeJS.WritableStream & { isTTY?: boolean };
  return { stream, text: () => chunks.join('') };
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: control characters are what is looked for.
const UNPRINTABLE = /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

// What an agent controls ends up in log fields: a verifier's error quotes its reward.json, an
// infra error quotes a command's output.
const FORGED_LINE = '{"reward": 1}\ngym: info: task 7 passed (reward 1)';
const TERMINAL_CONTROL = [
  '\u001b]0;owned\u0007', // sets the terminal's title
  '\u001b[2J\u001b[H', // clears the screen
  '\u009b31m', // C1 CSI: an escape sequence without ESC
  '\r', // overwrites the line shown so far
  '\u202eexe.txt', // right-to-left override
  '\u2028', // a line separator
];

describe('the readable log', () => {
  it('keeps agent text in a field on its own line, escaped as the JSON log escapes it', () => {
    const stderr = capture();
    const logger = commandLogger({}, stderr.stream);
    logger.warn({ task: 3, error: `invalid reward.json: ${FORGED_LINE}` }, 'verifier_error');
    logger.flush?.();
    const text = stderr.text();
    expect(text.split('\n')).toHaveLength(2); // one line, and the empty string after its end
    expect(text).toBe(
      `gym: warning: verifier_error (task 3, error invalid reward.json: {"reward": 1}\\ngym: info: task 7 passed (reward 1))\n`,
    );
  });

  it.each(TERMINAL_CONTROL)('shows no control of the terminal as is (%j)', (control) => {
    const stderr = capture();
    const logger = commandLogger({}, stderr.stream);
    logger.error({ output: `before${control}after`, nested: { output: control } }, `message ${control}`);
    const text = stderr.text();
    expect(text.endsWith('\n')).toBe(true);
    // Nothing unprintable is left anywhere but the line's own end.
    expect(text.slice(0, -1)).not.toMatch(UNPRINTABLE);
    expect(text).toMatch(/before\\[ru]/);
  });

  it('leaves ordinary text, quotes and non-ASCII letters as they are', () => {
    const line = JSON.stringify({ level: 30, msg: 'rollout "r1" done', path: 'C:\\work', note: 'déjà vu' });
    expect(readableLogLine(line)).toBe('gym: info: rollout "r1" done (path C:\\work, note déjà vu)\n');
  });

  it('escapes a line that is not JSON too', () => {
    expect(readableLogLine('plain\u001b[31m red\n')).toBe('plain\\u001b[31m red\n');
  });

  it('on a terminal still clears the progress bar before the line (its own control, not the text)', () => {
    const stderr = capture(true);
    commandLogger({}, stderr.stream).warn({ output: '\u001b[2K' }, 'w');
    expect(stderr.text()).toBe('\r\u001b[2Kgym: warning: w (output \\u001b[2K)\n');
  });
});
