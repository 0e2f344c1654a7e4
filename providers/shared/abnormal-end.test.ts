import { describe, expect, it } from 'vitest';
import type { ExecResult } from '../../core/schemas/exec.ts';
import { classifyAbnormalEnd, OomKillCounts, type OutsideView, type SandboxLoss } from './abnormal-end.ts';

const instant = async () => {};

function probeResult(stdout: string, exitCode = 0): ExecResult {
  return {
    status: 'ok',
    exitCode,
    stdout,
    stderr: '',
    stdoutTruncated: false,
    stderrTruncated: false,
    stdoutBytes: stdout.length,
    stderrBytes: 0,
    durationMs: 1,
  };
}

describe('classifyAbnormalEnd', () => {
  it('calls a kill an OOM kill only when the count rose since the last look', async () => {
    const counts = new OomKillCounts();
    counts.start('a');
    const views: OutsideView[] = [{ isAlive: true, oomKills: 1 }];
    const outsideView = async () => views[0]!;
    const probe = async () => null;
    expect(await classifyAbnormalEnd('a', counts, { outsideView, probe, sleep: instant })).toBe('oom');
    expect(await classifyAbnormalEnd('a', counts, { outsideView, probe, sleep: instant })).toBe('killed');
    views[0] = { isAlive: true, oomKills: null };
    expect(await classifyAbnormalEnd('a', counts, { outsideView, probe, sleep: instant })).toBe('killed');
  });

  it('looks again at a sandbox that still seems alive, and sees it gone once its keeper is', async () => {
    const seen: OutsideView[] = [
      { isAlive: true, oomKills: 0 },
      { isAlive: false, oomKills: null },
    ];
    const waits: number[] = [];
    const result = await classifyAbnormalEnd('b', new OomKillCounts(), {
      outsideView: async () => seen.shift() ?? { isAlive: true, oomKills: 0 },
      probe: async () => {
        throw new Error('not asked when there is an outside view');
      },
      sleep: async (ms) => {
        waits.push(ms);
      },
    });
    expect(result).toBe('sandbox_gone');
    expect(waits).toEqual([100]);
  });

  it('without an outside view, trusts only a probe that ran and exited 0', async () => {
    const counts = new OomKillCounts();
    const classify = (probe: () => Promise<ExecResult | null>) =>
      classifyAbnormalEnd('c', counts, { probe, sleep: instant });
    expect(await classify(async () => null)).toBe('sandbox_gone');
    expect(await classify(async () => probeResult('', 126))).toBe('sandbox_gone');
    expect(
      await classify(async () => {
        throw new Error('engine refused');
      }),
    ).toBe('sandbox_gone');
    expect(await classify(async () => probeResult('low 0\noom_kill 2\n'))).toBe('oom');
    expect(await classify(async () => probeResult('oom_kill 2\n'))).toBe('killed');
    expect(await classify(async () => probeResult('no counter here'))).toBe('killed');
  });

  it('takes a sandbox still running after its probe failed for alive: the end is a kill, not the sandbox gone', async () => {
    const counts = new OomKillCounts();
    const failed = async () => probeResult('', 126);
    const classify = (lossCause: () => Promise<'running' | null | SandboxLoss>) =>
      classifyAbnormalEnd('e', counts, { probe: failed, lossCause, sleep: instant });
    expect(await classify(async () => 'running')).toBe('killed');
    expect(await classify(async () => null)).toBe('sandbox_gone');
    const loss: SandboxLoss = { lost: 'oom', reason: 'the keeper was OOM-killed' };
    expect(await classify(async () => loss)).toEqual(loss);
  });

  it('falls back to the probe when the outside view fails', async () => {
    const result = await classifyAbnormalEnd('d', new OomKillCounts(), {
      outsideView: async () => {
        throw new Error('inspect failed');
      },
      probe: async () => probeResult('oom_kill 0\n'),
      sleep: instant,
    });
    expect(result).toBe('killed');
  });
});
