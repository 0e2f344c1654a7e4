import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { GymError } from '../../core/errors.ts';
import type { ExecResult } from '../../core/schemas/exec.ts';
import type { SandboxHandle } from '../../harnesses/harness.ts';
import { verifyScript } from './script.ts';

function result(status: ExecResult['status'], exitCode: number | null): ExecResult {
  return {
    status,
    exitCode,
    stdout: '',
    stderr: '',
    stdoutTruncated: false,
    stderrTruncated: false,
    stdoutBytes: 0,
    stderrBytes: 0,
    durationMs: 1,
  };
}

async function testsDirectory(): Promise<string> {
  const directory = await mkdtemp(join(tmpdir(), 'gym-script-verifier-'));
  await writeFile(join(directory, 'test.sh'), 'echo 1 > /logs/verifier/reward.txt\n');
  return directory;
}

function handle(run: ExecResult, readFile: SandboxHandle['readFile']): SandboxHandle {
  return {
    id: 'sbx-test',
    exec: async () => run,
    writeFile: async () => {},
    readFile,
    stopProcesses: async () => ({ killed: 0 }),
  };
}

describe('script verifier: only the test decides a reward', () => {
  it('reads the reward the test wrote', async () => {
    const verdict = await verifyScript(
      handle(result('ok', 0), async () => Buffer.from('1\n')),
      await testsDirectory(),
      1000,
    );
    expect(verdict).toMatchObject({ outcome: 'reward', reward: 1 });
  });

  it('scores 0 when the test wrote no reward file', async () => {
    const verdict = await verifyScript(
      handle(result('ok', 1), async () => {
        throw new GymError('FILE_NOT_FOUND', 'no such file');
      }),
      await testsDirectory(),
      1000,
    );
    expect(verdict).toMatchObject({ outcome: 'reward', reward: 0 });
  });

  it.each([
    ['a provider error', new GymError('PROVIDER_ERROR', 'engine said no')],
    ['a sandbox that went away', new GymError('SANDBOX_NOT_FOUND', 'gone')],
    ['a daemon that does not answer', new GymError('DAEMON_UNAVAILABLE', 'down')],
  ])('is an infra error when reading the reward fails with %s', async (_name, error) => {
    const verdict = await verifyScript(
      handle(result('ok', 0), async () => {
        throw error;
      }),
      await testsDirectory(),
      1000,
    );
    expect(verdict.outcome).toBe('infra_error');
  });

  it('is an infra error when test.sh was killed by something other than its timeout', async () => {
    const verdict = await verifyScript(
      handle(result('killed', null), async () => Buffer.from('1')),
      await testsDirectory(),
      1000,
    );
    expect(verdict.outcome).toBe('infra_error');
  });
});
