/**
 * mini-SWE-agent's own loop on this host with our sandbox as its environment: the real `mini`
 * command (2.4.6 from PyPI, on the runtime `gym agent install` made) selects
 * `gym_sandboxd.mini_swe_agent.GymSandboxdEnvironment` by its dotted path, talks to the scripted
 * model in its tool-call format, and solves a swe-mini task in a sandbox of a real daemon on
 * Docker. The submitted diff is then graded as SWE-bench grades (the hidden tests in a fresh
 * sandbox of the task image); a command past its timeout is shown to the agent as mini-SWE-agent
 * shows one, with nothing of it left running; the sandbox is gone once `mini` has exited.
 */
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { homedir, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildSweMiniImages } from '../cli/task-images.ts';
import { GymClient } from '../client/client.ts';
import { MINI_SWE_AGENT_RECIPE } from '../harnesses/installed/mini-swe-agent.ts';
import {
  type PythonHostSource,
  pythonRuntimeDir,
  readRuntimeManifest,
} from '../harnesses/installed/python-runtime.ts';
import { ModelScriptSchema } from '../harnesses/scripted-model/script.ts';
import { type ScriptedModelServer, startScriptedModelServer } from '../harnesses/scripted-model/server.ts';
import { collectProcess } from './collect-process.ts';
import { startTestDaemon, type TestDaemon } from './daemon-harness.ts';
import { dockerTestEnvironment, localImages } from './docker-available.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const REPOSITORY = new URL('..', import.meta.url).pathname;
const RUNTIME = pythonRuntimeDir(
  join(homedir(), '.cache', 'gym', 'agents'),
  MINI_SWE_AGENT_RECIPE.source as PythonHostSource,
);
const DRIVER = join(REPOSITORY, 'test', 'fixtures', 'mini-swe-agent-run.py');
const TASK_ID = 'mathutil-1';
const ENVIRONMENT_CLASS = 'gym_sandboxd.mini_swe_agent.GymSandboxdEnvironment';
const COMMAND_TIMEOUT_S = 3;

interface SweMiniRow {
  instance_id: string;
  problem_statement: string;
  test_patch: string;
  image: string;
  test_command: string;
  workdir: string;
}

const bash = (command: string, content = 'Next step.') => ({
  content,
  toolCalls: [{ name: 'bash', arguments: { command } }],
});
const COMMANDS = [
  'cat mathutil/bounds.py',
  'echo begun; sleep 300 & sleep 300',
  'ps -eo args',
  "sed -i '/value > high/{n;s/return low/return high/}' mathutil/bounds.py",
  'python3 -c "from mathutil.bounds import clamp; assert clamp(15, 0, 10) == 10; print(\'fixed\')"',
  'echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git diff',
];

const run = collectProcess;

describe.skipIf(skipReason !== undefined)('mini-SWE-agent 2.x with GymSandboxdEnvironment', () => {
  let model: ScriptedModelServer;
  let daemon: TestDaemon;
  let client: GymClient;
  let directory = '';
  let row: SweMiniRow;

  beforeAll(async () => {
    // set-up made it (`gym agent install`); a missing runtime is a failure, not a skip.
    expect(
      await readRuntimeManifest(RUNTIME),
      `no runtime at ${RUNTIME}: run gym agent install`,
    ).not.toBeNull();
    const rows = (await readFile(join(REPOSITORY, 'environments/swe-mini/data/example.jsonl'), 'utf8'))
      .trim()
      .split('\n')
      .map((line) => JSON.parse(line) as SweMiniRow);
    row = rows.find((candidate) => candidate.instance_id === TASK_ID)!;
    await buildSweMiniImages(localImages(docker), undefined, new Set([row.image]));
    model = await startScriptedModelServer(
      ModelScriptSchema.parse({
        conversations: [
          { match: 'clamp(15, 0, 10)', replies: [...COMMANDS.map((command) => bash(command))] },
        ],
      }),
    );
    daemon = await startTestDaemon(
      { namespace: `mini-env-${randomBytes(3).toString('hex')}`, destroyOnShutdown: true },
      { listen: true },
    );
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
    directory = await mkdtemp(join(tmpdir(), 'gym-mini-env-'));
  });

  afterAll(async () => {
    await daemon?.cleanup();
    await model?.close();
    if (directory !== '') await rm(directory, { recursive: true, force: true });
  });

  it('solves a swe-mini task through its own loop, shows a timeout as it does, and leaves no sandbox', async () => {
    const config = join(directory, 'gym.yaml');
    // What a user adds to their config (the image and cwd are the task's).
    await writeFile(
      config,
      [
        'environment:',
        `  environment_class: ${ENVIRONMENT_CLASS}`,
        `  image: ${row.image}`,
        `  cwd: ${row.workdir}`,
        `  timeout: ${COMMAND_TIMEOUT_S}`,
        '',
      ].join('\n'),
    );
    const trajectoryPath = join(directory, 'trajectory.json');
    const { code, output } = await run(
      join(RUNTIME, 'bin', 'python'),
      [
        DRIVER,
        join(REPOSITORY, 'python'),
        '-y',
        '--exit-immediately',
        '-m',
        'openai/scripted',
        '-l',
        '0',
        '-c',
        'mini.yaml',
        '-c',
        config,
        '-o',
        trajectoryPath,
        '-t',
        row.problem_statement,
      ],
      {
        PATH: process.env.PATH,
        HOME: directory,
        GYM_STATE_DIR: daemon.stateDir,
        OPENAI_API_BASE: model.baseUrl,
        OPENAI_BASE_URL: model.baseUrl,
        OPENAI_API_KEY: 'scripted',
        MSWEA_CONFIGURED: 'true',
        MSWEA_SILENT_STARTUP: '1',
        MSWEA_COST_TRACKING: 'ignore_errors',
        MSWEA_GLOBAL_CONFIG_DIR: join(directory, 'mini-config'),
        LITELLM_LOCAL_MODEL_COST_MAP: 'True',
      },
    );
    expect(code, output).toBe(0);
    const trajectory = JSON.parse(await readFile(trajectoryPath, 'utf8'));
    expect(trajectory.info.mini_version).toBe('2.4.6');
    expect(trajectory.info.exit_status, output).toBe('Submitted');
    expect(trajectory.info.config.environment_type).toBe(ENVIRONMENT_CLASS);
    expect(trajectory.info.config.environment.image).toBe(row.image);
    expect(JSON.stringify(trajectory)).not.toContain(daemon.token);

    // Every command ran, in order; its observation is mini-SWE-agent's own rendering of our result.
    const tools = (
      trajectory.messages as Array<{ role: string; content: string; extra?: Record<string, unknown> }>
    ).filter((message) => message.role === 'tool');
    // The submitting call ends the run: mini answers it itself ("action was not executed").
    expect(tools).toHaveLength(COMMANDS.length);
    expect(tools[0]!.content).toContain('return low');
    expect(tools[0]!.extra?.returncode).toBe(0);
    expect(tools[1]!.extra?.returncode).toBe(-1);
    expect(tools[1]!.content).toContain('begun');
    expect(tools[1]!.content).toContain(`timed out after ${COMMAND_TIMEOUT_S} seconds`);
    // The timed-out command and the job it left in the background are dead.
    expect(tools[2]!.content).not.toContain('sleep 300');
    expect(tools[4]!.content).toContain('fixed');

    // The submission is the diff; graded as SWE-bench does, in a fresh sandbox with the hidden tests.
    const submission: string = trajectory.info.submission;
    expect(submission).toContain('+        return high');
    const grader = await client.createSandbox({ image: row.image });
    try {
      await client.writeFile(grader.id, '/tmp/fix.diff', Buffer.from(submission));
      await client.writeFile(grader.id, '/tmp/tests.diff', Buffer.from(row.test_patch));
      const graded = await client.exec(grader.id, {
        command: `git apply /tmp/fix.diff && git apply /tmp/tests.diff && ${row.test_command}`,
        cwd: row.workdir,
        timeoutMs: 120_000,
      });
      expect(graded.exitCode, graded.stdout + graded.stderr).toBe(0);
      expect(graded.stdout).toContain('PASSED tests/test_issue.py::test_above');
    } finally {
      await client.destroySandbox(grader.id);
    }

    // mini never closes its environment: the sandbox went at its interpreter's exit.
    const left = await client.listSandboxes({ labels: { 'mini-swe-agent': '1' } });
    expect(left.map((sandbox) => sandbox.id)).toEqual([]);
  }, 300_000);
});
