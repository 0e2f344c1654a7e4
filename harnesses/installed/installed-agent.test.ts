/**
 * An installed agent's result files are its own output: one it made a directory, too big to read
 * or unparseable is the agent's failure (agent_error), never an infra error it could hide behind.
 */
import { describe, expect, it } from 'vitest';
import { GymError } from '../../core/errors.ts';
import { silentLogger } from '../../core/logger.ts';
import type { ExecResult } from '../../core/schemas/exec.ts';
import { execResult } from '../../test/fixtures/exec-result.ts';
import { DEFAULT_LIMITS, type HarnessResult, type SandboxHandle } from '../harness.ts';
import { createInstalledAgentHarness } from './installed-agent.ts';
import { MINI_SWE_AGENT_RECIPE } from './mini-swe-agent.ts';

const OK: ExecResult = execResult('ok', 0);

/** A sandbox where the agent is installed and runs to its end; its trajectory file reads as `read` says. */
function sandbox(read: SandboxHandle['readFile']): SandboxHandle {
  return {
    id: 'sbx-agent',
    exec: async () => OK,
    writeFile: async () => {},
    readFile: read,
    exposeGateway: async () => ({ url: 'http://127.0.0.1:4000' }),
  };
}

function run(read: SandboxHandle['readFile']): Promise<HarnessResult> {
  return createInstalledAgentHarness(MINI_SWE_AGENT_RECIPE).run({
    sandbox: sandbox(read),
    task: { id: 't', instruction: 'fix it', workdir: '/testbed' },
    model: { baseUrl: 'http://127.0.0.1:9/v1', basePath: '/v1', apiKey: 'k', model: 'm' },
    limits: DEFAULT_LIMITS,
    logger: silentLogger,
  });
}

const TRAJECTORY = JSON.stringify({
  info: { exit_status: 'Submitted', submission: 'done' },
  messages: [{ role: 'assistant', content: 'hi' }],
});

describe('installed agent: its result files', () => {
  it('submits what a well-formed trajectory says (the baseline)', async () => {
    const result = await run(async () => Buffer.from(TRAJECTORY));
    expect(result).toMatchObject({ outcome: 'submitted', submission: 'done' });
    // The trajectory file goes to the runner, which keeps it with the rollout.
    expect(result.agentFiles).toEqual([{ name: 'trajectory.json', content: Buffer.from(TRAJECTORY) }]);
  });

  it('hands over its output streams too, whatever the outcome', async () => {
    let calls = 0;
    const handle: SandboxHandle = {
      ...sandbox(async () => Buffer.from('not json {')),
      // The first exec checks for the binary; the second runs the agent, which fails.
      exec: async () => {
        calls += 1;
        return calls === 1 ? OK : execResult('ok', 1, { stdout: 'step 1\n', stderr: 'Traceback\n' });
      },
    };
    const result = await createInstalledAgentHarness(MINI_SWE_AGENT_RECIPE).run({
      sandbox: handle,
      task: { id: 't', instruction: 'fix it', workdir: '/testbed' },
      model: { baseUrl: 'http://127.0.0.1:9/v1', basePath: '/v1', apiKey: 'k', model: 'm' },
      limits: DEFAULT_LIMITS,
      logger: silentLogger,
    });
    expect(result.outcome).toBe('agent_error');
    expect(result.agentFiles?.map((file) => [file.name, file.content.toString()])).toEqual([
      ['stdout.txt', 'step 1\n'],
      ['stderr.txt', 'Traceback\n'],
      ['trajectory.json', 'not json {'],
    ]);
  });

  it.each([
    ['made a directory', new GymError('PATH_KIND_MISMATCH', 'is a directory, not a file')],
    ['made too big to read', new GymError('FILE_TOO_LARGE', 'larger than 16777216 bytes')],
    ['did not write', new GymError('FILE_NOT_FOUND', 'no such file')],
  ])('is an agent_error when the agent %s its trajectory file', async (_name, error) => {
    const result = await run(async () => {
      throw error;
    });
    expect(result.outcome).toBe('agent_error');
    expect(result.extra?.unreadableResultFiles).toEqual({
      '/tmp/gym-agent-mini-swe-agent/trajectory.json': `${error.code}: ${error.message}`,
    });
  });

  it.each([
    ['not JSON', 'not json {'],
    ['JSON of the wrong shape', 'null'],
    ['messages that are not a list', '{"messages": 5}'],
  ])('is an agent_error when the trajectory is %s', async (_name, text) => {
    const result = await run(async () => Buffer.from(text));
    expect(result.outcome).toBe('agent_error');
    expect(result.message).toMatch(/output could not be read/);
  });

  it('lets a provider error reading the file through (the runner makes it infra)', async () => {
    await expect(
      run(async () => {
        throw new GymError('PROVIDER_ERROR', 'engine said no');
      }),
    ).rejects.toMatchObject({ code: 'PROVIDER_ERROR' });
  });
});

describe('installed agent: preinstalled in the image (binaryPath)', () => {
  /** A sandbox that records every exec; `test -x` passes only for `present`. */
  function recording(present: string) {
    const argvs: string[][] = [];
    const handle: SandboxHandle = {
      ...sandbox(async () => Buffer.from(TRAJECTORY)),
      exec: async (request) => {
        argvs.push(request.argv ?? [String(request.command)]);
        if (request.argv?.[0] === 'test') return execResult('ok', request.argv[2] === present ? 0 : 1);
        return OK;
      },
    };
    return { handle, argvs };
  }
  const runWith = (handle: SandboxHandle, binaryPath: string) =>
    createInstalledAgentHarness(MINI_SWE_AGENT_RECIPE, { binaryPath }).run({
      sandbox: handle,
      task: { id: 't', instruction: 'fix it', workdir: '/testbed' },
      model: { baseUrl: 'http://127.0.0.1:9/v1', basePath: '/v1', apiKey: 'k', model: 'm' },
      limits: DEFAULT_LIMITS,
      logger: silentLogger,
    });

  it('runs the image’s binary and installs nothing', async () => {
    const { handle, argvs } = recording('/usr/local/bin/mini');
    const result = await runWith(handle, '/usr/local/bin/mini');
    expect(result.outcome, result.message).toBe('submitted');
    expect(argvs).toHaveLength(2);
    expect(argvs[1]![0]).toBe('/usr/local/bin/mini');
    expect(argvs.flat().join(' ')).not.toContain('bundle.tgz');
  });

  it('is an agent_error naming the path when the image lacks it, without installing', async () => {
    const { handle, argvs } = recording('/elsewhere');
    const result = await runWith(handle, '/usr/local/bin/mini');
    expect(result.outcome).toBe('agent_error');
    expect(result.message).toContain('/usr/local/bin/mini');
    expect(argvs).toHaveLength(1);
  });
});
