import { describe, expect, it } from 'vitest';
import type { ExecRequest, ExecResult } from '../../core/schemas/exec.ts';
import { waitUntilReady } from './readiness.ts';

function result(status: ExecResult['status'], exitCode: number | null, stderr = ''): ExecResult {
  return {
    status,
    exitCode,
    stdout: '',
    stderr,
    stdoutTruncated: false,
    stderrTruncated: false,
    stdoutBytes: 0,
    stderrBytes: stderr.length,
    durationMs: 1,
  };
}

describe('waitUntilReady', () => {
  it('tries the probe until it exits 0, with the probe command and a bounded timeout', async () => {
    const requests: ExecRequest[] = [];
    const answers = [result('ok', 1), result('timeout', null), result('ok', 0)];
    await waitUntilReady(
      { argv: ['test', '-f', '/ready'], timeoutMs: 5_000, intervalMs: 1 },
      async (request) => {
        requests.push(request);
        return answers.shift()!;
      },
    );
    expect(requests).toHaveLength(3);
    expect(requests[0]!.argv).toEqual(['test', '-f', '/ready']);
    expect(requests[0]!.timeoutMs).toBeLessThanOrEqual(5_000);
  });

  it('fails at once when the sandbox exits during the probe', async () => {
    await expect(
      waitUntilReady({ command: 'true', timeoutMs: 5_000, intervalMs: 1 }, async () =>
        result('sandbox_gone', null),
      ),
    ).rejects.toMatchObject({ code: 'SANDBOX_START_FAILED', message: expect.stringMatching(/exited/) });
  });

  it('fails when the time runs out, saying how the last try ended', async () => {
    await expect(
      waitUntilReady({ command: 'false', timeoutMs: 30, intervalMs: 5 }, async () =>
        result('ok', 1, 'not yet'),
      ),
    ).rejects.toMatchObject({
      code: 'SANDBOX_START_FAILED',
      message: expect.stringMatching(/within 30 ms \(last: status ok, exit 1: not yet\)/),
    });
  });
});
