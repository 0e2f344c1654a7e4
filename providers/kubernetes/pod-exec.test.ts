import { describe, expect, it } from 'vitest';
import { exitCodeOf } from './pod-exec.ts';

describe('exit status of a pods/exec Status (v4+)', () => {
  it('reads Success as 0 and the ExitCode cause of NonZeroExitCode', () => {
    expect(exitCodeOf({ metadata: {}, status: 'Success' })).toBe(0);
    expect(
      exitCodeOf({
        status: 'Failure',
        reason: 'NonZeroExitCode',
        details: { causes: [{ reason: 'ExitCode', message: '137' }] },
      }),
    ).toBe(137);
  });

  it('gives no exit code for a failure that carries none (the runtime could not run the command)', () => {
    expect(
      exitCodeOf({ status: 'Failure', reason: 'InternalError', code: 500, message: 'error executing' }),
    ).toBeNull();
    expect(
      exitCodeOf({ status: 'Failure', details: { causes: [{ reason: 'ExitCode', message: 'x' }] } }),
    ).toBeNull();
  });
});
