/**
 * The real mini-swe-agent 2.x (from PyPI, `gym agent install`) inside Docker sandboxes with no
 * network but the gateway relay, driven by the scripted model speaking its tool-call format (one
 * `bash` tool, `{"command": ...}`; `echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT` alone submits):
 * on its own Python 3.13 runtime, bound read-only or copied in, with the image's Python untouched.
 */
import { randomBytes } from 'node:crypto';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../../client/client.ts';
import { silentLogger } from '../../core/logger.ts';
import { startTestDaemon, type TestDaemon } from '../../test/daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../../test/docker-available.ts';
import { DEFAULT_LIMITS, type HarnessLimits } from '../harness.ts';
import { HarnessRegistry } from '../registry.ts';
import { clientSandboxHandle } from '../sandbox-handle.ts';
import { ModelScriptSchema } from '../scripted-model/script.ts';
import { type ScriptedModelServer, startScriptedModelServer } from '../scripted-model/server.ts';
import { MINI_SWE_AGENT_RECIPE } from './mini-swe-agent.ts';
import { type PythonHostSource, pythonRuntimeDir, readRuntimeManifest } from './python-runtime.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const debian = skipReason === undefined ? await testImage(docker, 'debian-base') : 'gym/debian-base:missing';
const busybox = skipReason === undefined ? await testImage(docker, 'busybox') : 'gym/busybox:missing';

const AGENT_CACHE_DIR = join(homedir(), '.cache', 'gym', 'agents');
const RUNTIME = pythonRuntimeDir(AGENT_CACHE_DIR, MINI_SWE_AGENT_RECIPE.source as PythonHostSource);
const SETUP_REPO = [
  'mkdir -p /work/repo && cd /work/repo && git init -q',
  "printf 'def add(a, b):\\n    return a - b\\n' > calc.py",
  'git add -A && git -c user.email=gym@example.invalid -c user.name=gym commit -qm init',
].join(' && ');
const bash = (command: string, content = 'Next step.') => ({
  content,
  toolCalls: [{ name: 'bash', arguments: { command } }],
});
const SUBMIT = bash('echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT', 'Done.');
/** What the image's own Python has: it must read the same after the agent ran. */
const PIP_LIST =
  'python3 -m pip list --format=freeze 2>/dev/null; python3 -c "import sys; print(sys.version, sys.path)"';

describe.skipIf(skipReason !== undefined)('mini-swe-agent 2.x in real Docker sandboxes', () => {
  let model: ScriptedModelServer;
  let daemon: TestDaemon;
  let client: GymClient;
  const registry = new HarnessRegistry();

  beforeAll(async () => {
    // set-up made it (`gym agent install`); a missing runtime is a failure, not a skip.
    expect(
      await readRuntimeManifest(RUNTIME),
      `no runtime at ${RUNTIME}: run gym agent install`,
    ).not.toBeNull();
    model = await startScriptedModelServer(
      ModelScriptSchema.parse({
        conversations: [
          {
            match: 'task mini2-fix',
            replies: [
              bash('cat calc.py', 'Let me read the code first.'),
              bash("sed -i 's/a - b/a + b/' calc.py", 'The operator is wrong.'),
              bash('python3 -c "from calc import add; assert add(2, 3) == 5; print(\'ok\')"'),
              SUBMIT,
            ],
          },
          {
            match: 'task mini2-format',
            // A reply without a tool call is refused and fed back; the agent goes on.
            rules: [
              { lastMessageContains: 'No tool calls found', reply: bash("sed -i 's/a - b/a + b/' calc.py") },
            ],
            replies: [{ content: 'No tool this time.' }, SUBMIT],
          },
          { match: 'task mini2-endless', replies: [bash('sleep 1; echo again')] },
        ],
      }),
    );
    daemon = await startTestDaemon(
      {
        namespace: `mini2-${randomBytes(3).toString('hex')}`,
        providers: [{ name: 'docker', options: { allowedHostPaths: [AGENT_CACHE_DIR] } }],
        gateway: { upstream: { baseUrl: model.baseUrl, model: 'scripted' }, maxRetries: 1 },
      },
      { listen: true },
    );
    client = new GymClient({ url: daemon.address.url!, token: daemon.token });
  });

  afterAll(async () => {
    await daemon?.stop({ destroy: true });
    await model?.close();
  });

  async function run(
    taskId: string,
    options: { image?: string; setup?: string; bind?: boolean; limits?: Partial<HarnessLimits> } = {},
  ) {
    const providerOptions =
      options.bind === false
        ? {}
        : { readOnlyBinds: [{ hostPath: RUNTIME, path: '/opt/gym-agents/mini-swe-agent' }] };
    const sandbox = await client.createSandbox({ image: options.image ?? debian, providerOptions });
    try {
      const setup = await client.exec(sandbox.id, { command: options.setup ?? SETUP_REPO });
      expect(setup.exitCode, setup.stderr).toBe(0);
      const before = await client.exec(sandbox.id, { command: PIP_LIST });
      const rollout = await client.openRollout({});
      const result = await (await registry.create('mini-swe-agent')).run({
        sandbox: clientSandboxHandle(client, sandbox.id),
        task: { id: taskId, instruction: `Fix add() in calc.py (task ${taskId}).`, workdir: '/work/repo' },
        model: {
          baseUrl: `${client.url}${rollout.basePath}`,
          basePath: rollout.basePath,
          apiKey: rollout.key,
          model: 'any',
        },
        limits: { ...DEFAULT_LIMITS, ...options.limits },
        logger: silentLogger,
      });
      const calc = (await client.exec(sandbox.id, { argv: ['cat', '/work/repo/calc.py'] })).stdout;
      const after = await client.exec(sandbox.id, { command: PIP_LIST });
      const records = (await client.rolloutRecords(rollout.rolloutId)) as Array<Record<string, unknown>>;
      return { result, calc, records, before: before.stdout, after: after.stdout };
    } finally {
      await client.destroySandbox(sandbox.id);
    }
  }

  it('fixes the bug through its bash tool calls, bound read-only, every call in the gateway records', async () => {
    const { result, calc, records, before, after } = await run('mini2-fix');
    expect(result.outcome, `${result.message}\n${JSON.stringify(result.extra).slice(0, 3000)}`).toBe(
      'submitted',
    );
    expect(calc).toContain('return a + b');
    // Its own trajectory file, kept with the rollout, and read into steps with their observations.
    const trajectory = result.agentFiles?.find((file) => file.name === 'trajectory.json');
    expect(JSON.parse(trajectory!.content.toString()).info.mini_version).toBe('2.4.6');
    expect(result.trajectory.map((step) => step.action?.arguments.command)).toEqual([
      'cat calc.py',
      "sed -i 's/a - b/a + b/' calc.py",
      'python3 -c "from calc import add; assert add(2, 3) == 5; print(\'ok\')"',
      'echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT',
    ]);
    expect(result.trajectory[0]!.observation).toContain('return a - b');
    // The task's python3 ran the check: the image's own Python, not the agent's.
    expect(result.trajectory[2]!.observation).toContain('ok');
    const calls = records.filter((record) => record.api === 'chat.completions');
    expect(calls).toHaveLength(4);
    // The image's Python and packages are as they were.
    expect(after).toBe(before);
    expect(before).toContain('3.11');
  }, 180_000);

  it('goes on after a reply without a tool call (fed back as a format error)', async () => {
    const { result, calc } = await run('mini2-format');
    expect(result.outcome, result.message).toBe('submitted');
    expect(calc).toContain('return a + b');
    expect(result.trajectory[0]!.error).toContain('No tool calls found');
  }, 180_000);

  it('is copied in where nothing is bound, and runs on an image with no Python and no glibc (busybox)', async () => {
    const { result, calc } = await run('mini2-fix', {
      image: busybox,
      bind: false,
      setup: "mkdir -p /work/repo && printf 'def add(a, b):\\n    return a - b\\n' > /work/repo/calc.py",
    });
    // busybox has no python3: the agent's own check fails, which is its business; the edit lands.
    expect(calc).toContain('return a + b');
    expect(result.trajectory[2]!.observation).toMatch(/python3: not found|No such file/);
    expect(result.outcome, result.message).toBe('submitted');
  }, 300_000);

  it('is killed at its wall time and graded as its own time limit, never infra', async () => {
    const { result } = await run('mini2-endless', { limits: { wallTimeMs: 20_000 } });
    expect(result.outcome).toBe('time_limit');
  }, 180_000);
});
