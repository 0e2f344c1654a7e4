import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { GymError } from '../../core/errors.ts';
import type { ExecResult } from '../../core/schemas/exec.ts';
import type { SandboxHandle } from '../../harnesses/harness.ts';
import { execResult } from '../../test/fixtures/exec-result.ts';
import { PREPARE_PATHS_COMMAND, verifyScript } from './script.ts';

function result(status: ExecResult['status'], exitCode: number | null, stderr = ''): ExecResult {
  return execResult(status, exitCode, { stderr });
}

async function testsDirectory(): Promise<string> {
  const directory = await mkdtemp(join(tmpdir(), 'gym-script-verifier-'));
  await writeFile(join(directory, 'test.sh'), 'echo 1 > /logs/verifier/reward.txt\n');
  return directory;
}

/** The agent's sandbox: test.sh ends as `run`; the other steps as the overrides say, else well. */
function handle(
  run: ExecResult,
  readFile: SandboxHandle['readFile'],
  overrides: { prepare?: ExecResult; writeFile?: SandboxHandle['writeFile'] } = {},
): SandboxHandle {
  return {
    id: 'sbx-test',
    exec: async (request) =>
      request.command === PREPARE_PATHS_COMMAND ? (overrides.prepare ?? result('ok', 0)) : run,
    writeFile: overrides.writeFile ?? (async () => {}),
    readFile,
    stopProcesses: async () => ({ killed: 0 }),
  };
}

const noRewardFile = async (): Promise<Buffer> => {
  throw new GymError('FILE_NOT_FOUND', 'no such file');
};

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

  it.each([
    ['killed', result('killed', 137)],
    ['oom', result('oom', 137)],
  ])(
    'grades a test.sh that ended %s (a program it ran can kill -9 $PPID): no reward file is 0',
    async (status, run) => {
      const verdict = await verifyScript(handle(run, noRewardFile), await testsDirectory(), 1000);
      expect(verdict).toMatchObject({ outcome: 'reward', reward: 0 });
      expect(String(verdict.details.reason)).toContain(status);
    },
  );

  it('grades a killed test.sh by the reward it wrote', async () => {
    const verdict = await verifyScript(
      handle(result('killed', 137), async () => Buffer.from('1')),
      await testsDirectory(),
      1000,
    );
    expect(verdict).toMatchObject({ outcome: 'reward', reward: 1 });
  });

  it('is an infra error when the sandbox went away during the tests', async () => {
    const verdict = await verifyScript(
      handle(result('sandbox_gone', null), noRewardFile),
      await testsDirectory(),
      1000,
    );
    expect(verdict.outcome).toBe('infra_error');
  });
});

describe("script verifier: the agent's files and tools where the tests go", () => {
  it('prepares /tests and /logs/verifier as root, after stopping the agent, before copying the tests', async () => {
    const calls: string[] = [];
    const sandbox: SandboxHandle = {
      id: 'sbx-test',
      exec: async (request) => {
        calls.push(request.command === PREPARE_PATHS_COMMAND ? `prepare as ${request.user}` : 'test.sh');
        return result('ok', 0);
      },
      writeFile: async (path) => {
        calls.push(`write ${path}`);
      },
      readFile: async () => Buffer.from('1'),
      stopProcesses: async () => {
        calls.push('stop');
        return { killed: 0 };
      },
    };
    expect(await verifyScript(sandbox, await testsDirectory(), 1000)).toMatchObject({ reward: 1 });
    expect(calls).toEqual(['stop', 'prepare as 0', 'write /tests/test.sh', 'test.sh', 'stop']);
  });

  it.each([
    ['exits non-zero (the agent broke rm or mkdir)', result('ok', 1, 'mkdir: cannot create directory')],
    ['is killed (a replaced rm killed itself)', result('killed', 137)],
    ['times out (a tree too big to remove)', result('timeout', null)],
  ])('scores 0 when preparing the paths %s', async (_name, prepare) => {
    const verdict = await verifyScript(
      handle(result('ok', 0), async () => Buffer.from('1'), { prepare }),
      await testsDirectory(),
      1000,
    );
    expect(verdict).toMatchObject({ outcome: 'reward', reward: 0 });
    expect(String(verdict.details.reason)).toMatch(/could not be prepared/);
  });

  it.each([
    ['the sandbox went away', result('sandbox_gone', null)],
    ['it was killed with no exit code', result('killed', null)],
  ])('is an infra error when, preparing the paths, %s', async (_name, prepare) => {
    const verdict = await verifyScript(
      handle(result('ok', 0), async () => Buffer.from('1'), { prepare }),
      await testsDirectory(),
      1000,
    );
    expect(verdict.outcome).toBe('infra_error');
  });

  it('is an infra error when test.sh was killed with no exit code (the engine lost track of it)', async () => {
    const verdict = await verifyScript(
      handle(result('killed', null), async () => Buffer.from('1')),
      await testsDirectory(),
      1000,
    );
    expect(verdict.outcome).toBe('infra_error');
  });

  it('scores 0 when copying the tests meets a disk the agent filled', async () => {
    const verdict = await verifyScript(
      handle(result('ok', 0), async () => Buffer.from('1'), {
        writeFile: async () => {
          throw new GymError('PROVIDER_ERROR', 'Docker write file failed: no space left on device');
        },
      }),
      await testsDirectory(),
      1000,
    );
    expect(verdict).toMatchObject({ outcome: 'reward', reward: 0 });
  });

  it('scores 0 when copying the tests meets a path of the wrong kind (a planted /tests)', async () => {
    const verdict = await verifyScript(
      handle(result('ok', 0), async () => Buffer.from('1'), {
        writeFile: async () => {
          throw new GymError('PATH_KIND_MISMATCH', '/tests is not a directory');
        },
      }),
      await testsDirectory(),
      1000,
    );
    expect(verdict).toMatchObject({ outcome: 'reward', reward: 0 });
    expect(String(verdict.details.reason)).toMatch(/could not be prepared.*\/tests/);
  });

  it.each([
    ['PROVIDER_ERROR', new GymError('PROVIDER_ERROR', 'engine said no')],
    ['SANDBOX_NOT_FOUND', new GymError('SANDBOX_NOT_FOUND', 'gone')],
  ])('lets a %s while copying the tests through (the runner makes it infra)', async (_name, error) => {
    const verifying = verifyScript(
      handle(result('ok', 0), async () => Buffer.from('1'), {
        writeFile: async () => {
          throw error;
        },
      }),
      await testsDirectory(),
      1000,
    );
    await expect(verifying).rejects.toBe(error);
  });
});

describe("Harbor's reward.json and Terminal-Bench's pytest grading", () => {
  const harbor = { workdir: '/app', env: {} };
  const files =
    (json: string): SandboxHandle['readFile'] =>
    async (path) => {
      if (path === '/logs/verifier/reward.json') return Buffer.from(json);
      throw new GymError('FILE_NOT_FOUND', 'no such file');
    };

  it('keeps every metric of a reward.json that names no "reward", and takes their mean as the scalar', async () => {
    // Seen: several metrics without "reward" were a verifier error, and the scores were lost.
    const verdict = await verifyScript(
      handle(result('ok', 0), files('{"accuracy": 1, "style": 0.5, "note": "text is not a metric"}')),
      await testsDirectory(),
      1000,
      harbor,
    );
    expect(verdict).toMatchObject({
      outcome: 'reward',
      reward: 0.75,
      details: {
        rewards: { accuracy: 1, style: 0.5 },
        reward_derived: expect.stringMatching(/mean of 2 metrics/),
      },
    });
    const named = await verifyScript(
      handle(result('ok', 0), files('{"reward": 0, "accuracy": 1}')),
      await testsDirectory(),
      1000,
      harbor,
    );
    expect(named).toMatchObject({
      outcome: 'reward',
      reward: 0,
      details: { rewards: { reward: 0, accuracy: 1 } },
    });
    const none = await verifyScript(
      handle(result('ok', 0), files('{"note": "nothing numeric"}')),
      await testsDirectory(),
      1000,
      harbor,
    );
    expect(none).toMatchObject({ outcome: 'verifier_error' });
  });

  const runs = (stdout: string) => {
    const commands: unknown[] = [];
    const sandbox: SandboxHandle = {
      ...handle({ ...result('ok', 0), stdout }, noRewardFile),
      exec: async (request) => {
        commands.push(request);
        return request.command === PREPARE_PATHS_COMMAND ? result('ok', 0) : { ...result('ok', 0), stdout };
      },
    };
    return { sandbox, commands };
  };
  const summary = (lines: string[]) =>
    `============ test session starts ============\n...\n=========================== short test summary info ============================\n${lines.join('\n')}\n======= done =======\n`;

  it("runs run-tests.sh with bash and TEST_DIR=/tests, resolved only when pytest's summary lists tests that all passed", async () => {
    const passing = runs(
      summary([
        'PASSED ../tests/test_outputs.py::test_a',
        'SKIPPED [1] x.py:3: slow',
        'XFAIL ../tests/test_outputs.py::test_b',
      ]),
    );
    const verdict = await verifyScript(passing.sandbox, await testsDirectory(), 1000, {
      ...harbor,
      terminalBench: { runTests: Buffer.from('pytest -rA "$TEST_DIR"') },
    });
    expect(verdict).toMatchObject({ outcome: 'reward', reward: 1 });
    expect(passing.commands.at(-1)).toMatchObject({
      argv: ['bash', '/tests/run-tests.sh'],
      cwd: '/app',
      env: { TEST_DIR: '/tests' },
    });
    for (const [output, reason] of [
      [
        summary(['PASSED t.py::test_a', 'FAILED t.py::test_b - assert 1 == 2']),
        /not every test passed: t\.py::test_b/,
      ],
      [summary(['PASSED t.py::test_a', 'XPASS t.py::test_c']), /XPASS/],
      [summary([]), /lists no test/],
      ['PASSED t.py::test_a\n', /no pytest short test summary/],
    ] as const) {
      const { sandbox } = runs(output);
      const graded = await verifyScript(sandbox, await testsDirectory(), 1000, {
        ...harbor,
        terminalBench: { runTests: null },
      });
      expect(graded).toMatchObject({ outcome: 'reward', reward: 0 });
      expect(String(graded.details.reason)).toMatch(reason);
    }
  });
});
