import { describe, expect, it } from 'vitest';
import type { ExecResult } from '../../../core/schemas/exec.ts';
import { runHarborHealthcheck } from './healthcheck.ts';

const result = (exitCode: number, status: ExecResult['status'] = 'ok') =>
  ({ status, exitCode, stdout: '', stderr: exitCode === 0 ? '' : 'not yet', durationMs: 1 }) as ExecResult;

/** A sandbox whose check answers the exit codes given, in turn, on a clock that pauses move. */
function scripted(codes: number[]) {
  let clockMs = 0;
  const pauses: number[] = [];
  const commands: string[] = [];
  return {
    sandbox: {
      exec: async (request: { command?: string }) => {
        commands.push(String(request.command));
        return result(codes.shift() ?? 1);
      },
    },
    options: {
      now: () => clockMs,
      pause: async (milliseconds: number) => {
        pauses.push(milliseconds);
        clockMs += milliseconds;
      },
    },
    pauses,
    commands,
  };
}

const check = {
  command: 'test -f /tmp/ready',
  interval_sec: 2,
  timeout_sec: 5,
  start_period_sec: 10,
  start_interval_sec: 1,
  retries: 3,
};

describe('runHarborHealthcheck', () => {
  it('does not count failures in the start period, and passes at the first success', async () => {
    const run = scripted([1, 1, 1, 1, 1, 0]);
    await expect(runHarborHealthcheck(run.sandbox, check, run.options)).resolves.toEqual({ tries: 6 });
    // Five failures, all within the 10 s start period: each followed by the start interval.
    expect(run.pauses).toEqual([1000, 1000, 1000, 1000, 1000]);
    expect(run.commands.every((command) => command === 'test -f /tmp/ready')).toBe(true);
  });

  it('fails after its retries in a row once the start period is over, naming the command', async () => {
    const run = scripted([]);
    await expect(
      runHarborHealthcheck(run.sandbox, { ...check, start_period_sec: 0 }, run.options),
    ).rejects.toThrow(/failed 3 times in a row \(exit 1\): test -f \/tmp\/ready; its output ends: not yet/);
    expect(run.pauses).toEqual([2000, 2000]);
  });

  it('counts only failures after the start period', async () => {
    const run = scripted([]);
    await expect(
      runHarborHealthcheck(run.sandbox, { ...check, start_period_sec: 3 }, run.options),
    ).rejects.toThrow(/failed 3 times/);
    // Three tries in the start period (0, 1, 2 s), then three counted ones.
    expect(run.pauses).toEqual([1000, 1000, 1000, 2000, 2000]);
  });
});
