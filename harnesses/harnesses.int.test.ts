import { randomBytes } from 'node:crypto';
import { dirname } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { GymClient } from '../client/client.ts';
import { silentLogger } from '../core/logger.ts';
import { startTestDaemon, type TestDaemon } from '../test/daemon-harness.ts';
import { dockerTestEnvironment, testImage } from '../test/docker-available.ts';
import {
  DEFAULT_LIMITS,
  type Harness,
  type HarnessLimits,
  type HarnessTask,
  type ModelEndpoint,
} from './harness.ts';
import { CLAUDE_CODE_RECIPE } from './installed/claude-code.ts';
import { CODEX_RECIPE } from './installed/codex.ts';
import {
  ensureAgentOnHost,
  ensureNodeAgentOnHost,
  type NpmHostSource,
  type NpmNodeSource,
} from './installed/installed-agent.ts';
import { OPENCODE_RECIPE } from './installed/opencode.ts';
import { PI_RECIPE } from './installed/pi.ts';
import { QWEN_CODE_RECIPE } from './installed/qwen-code.ts';
import { HarnessRegistry } from './registry.ts';
import { clientSandboxHandle } from './sandbox-handle.ts';
import { ModelScriptSchema } from './scripted-model/script.ts';
import { type ScriptedModelServer, startScriptedModelServer } from './scripted-model/server.ts';

const { docker, skipReason } = await dockerTestEnvironment();
const debian = skipReason === undefined ? await testImage(docker, 'debian-base') : 'gym/debian-base:missing';

const AGENT_CACHE_DIR = `${process.env.HOME}/.cache/gym/agents`;
const SETUP_REPO = [
  'mkdir -p /work/repo && cd /work/repo && git init -q',
  "printf 'def add(a, b):\\n    return a - b\\n' > calc.py",
  "printf 'from calc import add\\n\\ndef test_add():\\n    assert add(2, 3) == 5\\n' > test_calc.py",
  'git add -A && git -c user.email=gym@example.invalid -c user.name=gym commit -qm init',
].join(' && ');
const GOLD_PATCH = `diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
`;
const SUBMIT = 'echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT && git add -A && git diff --cached';
const bash = (command: string) => ({ content: `Next step.\n\`\`\`bash\n${command}\n\`\`\`` });

describe.skipIf(skipReason !== undefined)('harnesses in real Docker sandboxes', () => {
  let model: ScriptedModelServer;
  let daemon: TestDaemon;
  let client: GymClient;
  const registry = new HarnessRegistry();

  beforeAll(async () => {
    model = await startScriptedModelServer(
      ModelScriptSchema.parse({
        conversations: [
          {
            match: 'task mini-fix',
            replies: [bash("sed -i 's/a - b/a + b/' calc.py"), bash('python3 -m pytest -q'), bash(SUBMIT)],
          },
          {
            match: 'task tools-fix',
            replies: [
              {
                toolCalls: [
                  { name: 'str_replace', arguments: { path: 'calc.py', old_str: 'a - b', new_str: 'a + b' } },
                ],
              },
              { toolCalls: [{ name: 'bash', arguments: { command: 'python3 -m pytest -q' } }] },
              { content: 'Fixed add.' },
            ],
          },
          { match: 'task malformed', replies: [{ content: 'I will not use a code block.' }] },
          { match: 'task endless', replies: [bash('echo again')] },
          { match: 'task upstream-down', replies: [{ error: { status: 500, message: 'down' } }] },
          {
            match: 'task context-overflow',
            replies: [{ error: { status: 400, message: 'maximum context length exceeded' } }],
          },
          {
            match: 'task opencode-fix',
            // OpenCode first asks for a session title, with no tools declared.
            rules: [{ hasTools: false, reply: { content: 'Fix add' } }],
            replies: [
              {
                toolCalls: [
                  {
                    name: 'bash',
                    arguments: { command: "sed -i 's/a - b/a + b/' calc.py", description: 'Fix add' },
                  },
                ],
              },
              { content: 'Fixed with opencode.' },
            ],
          },
          {
            match: 'task claude-fix',
            // Side calls (a title, a summary) declare no tools.
            rules: [{ hasTools: false, reply: { content: 'Fix add' } }],
            replies: [
              {
                content: 'I will fix the operator.',
                toolCalls: [
                  {
                    name: 'Bash',
                    arguments: { command: "sed -i 's/a - b/a + b/' calc.py", description: 'Fix add' },
                  },
                ],
              },
              { content: 'Fixed with Claude Code.' },
            ],
          },
          {
            match: 'task claude-tokens',
            rules: [{ hasTools: false, reply: { content: 'Fix add' } }],
            replies: [
              {
                content: 'I will read it first.',
                toolCalls: [
                  { name: 'Bash', arguments: { command: 'cat calc.py', description: 'Read calc' } },
                ],
              },
              {
                content: 'Now the fix.',
                toolCalls: [
                  {
                    name: 'Bash',
                    arguments: { command: "sed -i 's/a - b/a + b/' calc.py", description: 'Fix add' },
                  },
                ],
                // The upstream tokenises this call's history anew, into other ids: the gateway must flag it.
                retokeniseHistory: true,
              },
              { content: 'Fixed with exact tokens.' },
            ],
          },
          {
            match: 'task qwen-fix',
            rules: [{ hasTools: false, reply: { content: 'Fix add' } }],
            replies: [
              // Qwen Code refuses to change a file it has not read in the session.
              { toolCalls: [{ name: 'read_file', arguments: { file_path: '/work/repo/calc.py' } }] },
              {
                toolCalls: [
                  { name: 'run_shell_command', arguments: { command: "sed -i 's/a - b/a + b/' calc.py" } },
                ],
              },
              { content: 'Fixed with Qwen Code.' },
            ],
          },
          {
            match: 'task pi-fix',
            rules: [{ hasTools: false, reply: { content: 'Fix add' } }],
            replies: [
              { toolCalls: [{ name: 'bash', arguments: { command: "sed -i 's/a - b/a + b/' calc.py" } }] },
              { content: 'Fixed with Pi.' },
            ],
          },
          {
            match: 'task codex-fix',
            replies: [
              {
                toolCalls: [{ name: 'exec_command', arguments: { cmd: "sed -i 's/a - b/a + b/' calc.py" } }],
              },
              { content: 'Done: add now adds.' },
            ],
          },
        ],
      }),
    );
    daemon = await startTestDaemon(
      {
        namespace: `harness-${randomBytes(3).toString('hex')}`,
        // The agent CLIs are bind-mounted read-only from the host cache: the one host path allowed.
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
    harness: Harness,
    taskId: string,
    limits: Partial<HarnessLimits> = {},
    providerOptions: Record<string, unknown> = {},
    rolloutOptions: Parameters<GymClient['openRollout']>[0] = {},
  ) {
    const sandbox = await client.createSandbox({ image: debian, providerOptions });
    const setup = await client.exec(sandbox.id, { command: SETUP_REPO });
    expect(setup.exitCode, setup.stderr).toBe(0);
    const rollout = await client.openRollout(rolloutOptions);
    const endpoint: ModelEndpoint = {
      baseUrl: `${client.url}${rollout.basePath}`,
      basePath: rollout.basePath,
      apiKey: rollout.key,
      model: 'any',
    };
    const task: HarnessTask = {
      id: taskId,
      instruction: `Fix add() in calc.py (task ${taskId}).`,
      workdir: '/work/repo',
      goldPatch: GOLD_PATCH,
    };
    const result = await harness.run({
      sandbox: clientSandboxHandle(client, sandbox.id),
      task,
      model: endpoint,
      limits: { ...DEFAULT_LIMITS, ...limits },
      logger: silentLogger,
    });
    const calc = (await client.exec(sandbox.id, { argv: ['cat', '/work/repo/calc.py'] })).stdout;
    const records = (await client.rolloutRecords(rollout.rolloutId)) as Array<Record<string, unknown>>;
    await client.destroySandbox(sandbox.id);
    return { result, calc, records };
  }

  it('oracle applies the gold patch without a model', async () => {
    const { result, calc, records } = await run(await registry.create('oracle'), 'oracle-fix');
    expect(result.outcome).toBe('submitted');
    expect(calc).toContain('return a + b');
    expect(records).toEqual([]);
  });

  it('mini-swe fixes the bug through bash blocks and submits the diff', async () => {
    const { result, calc, records } = await run(await registry.create('mini-swe'), 'mini-fix');
    expect(result.outcome, result.message).toBe('submitted');
    expect(result.submission).toContain('+    return a + b');
    expect(calc).toContain('return a + b');
    expect(result.trajectory.map((step) => step.action?.arguments.command)).toEqual([
      "sed -i 's/a - b/a + b/' calc.py",
      'python3 -m pytest -q',
      SUBMIT,
    ]);
    expect(result.trajectory[1]?.observation).toContain('1 passed');
    expect(records).toHaveLength(3);
    expect(records.every((record) => record.status === 'ok')).toBe(true);
    // The trajectory and its records survive a JSON round trip unchanged.
    expect(JSON.parse(JSON.stringify({ result, records }))).toEqual({ result, records });
  });

  it('tool-calling fixes the bug with str_replace and bash, ending on a plain answer', async () => {
    const { result, calc, records } = await run(await registry.create('tool-calling'), 'tools-fix');
    expect(result.outcome, result.message).toBe('submitted');
    expect(result.submission).toBe('Fixed add.');
    expect(calc).toContain('return a + b');
    expect(result.trajectory[1]?.observation).toContain('1 passed');
    expect(records).toHaveLength(3);
  });

  it('ends malformed, endless and failing-model runs with typed results, never a hang', async () => {
    const harness = await registry.create('mini-swe');
    const malformed = await run(harness, 'malformed');
    expect(malformed.result.outcome).toBe('agent_error');
    expect(malformed.result.message).toContain('3 format errors');
    const endless = await run(harness, 'endless', { maxSteps: 4 });
    expect(endless.result.outcome).toBe('step_limit');
    expect(endless.result.steps).toBe(4);
    const down = await run(harness, 'upstream-down');
    // The model upstream being down is not the agent's doing: an infra error, retried, never graded.
    expect(down.result.outcome).toBe('infra_error');
    expect(down.result.message).toContain('502');
    expect(down.records[0]).toMatchObject({ status: 'error', error: { upstreamStatus: 500 } });
    // The upstream refusing the conversation itself (past its context length) is the agent's.
    const overflow = await run(harness, 'context-overflow');
    expect(overflow.result.outcome, overflow.result.message).toBe('agent_error');
    expect(overflow.records[0]).toMatchObject({ status: 'error', error: { upstreamStatus: 400 } });
  });

  it('Codex CLI runs inside the sandbox, reaches only the gateway, and edits the file', async () => {
    const hostBinary = await ensureAgentOnHost(CODEX_RECIPE.source as NpmHostSource, AGENT_CACHE_DIR);
    const { result, calc, records } = await run(
      await registry.create('codex'),
      'codex-fix',
      { wallTimeMs: 120_000 },
      {
        readOnlyBinds: [{ hostPath: dirname(hostBinary), path: dirname(CODEX_RECIPE.sandboxBinaryPath) }],
      },
    );
    expect(result.outcome, `${result.message}\n${JSON.stringify(result.extra)}`).toBe('submitted');
    expect(result.submission).toBe('Done: add now adds.');
    // Its own event stream, for the runner to keep with the rollout.
    const stdout = result.agentFiles?.find((file) => file.name === 'stdout.txt')?.content.toString() ?? '';
    expect(stdout.split('\n').filter((line) => line.startsWith('{')).length).toBeGreaterThan(1);
    expect(stdout).toContain('Done: add now adds.');
    expect(calc).toContain('return a + b');
    expect(result.trajectory.some((step) => step.action?.tool === 'exec_command')).toBe(true);
    expect(records.length).toBeGreaterThanOrEqual(2);
    expect(records.every((record) => record.api === 'responses')).toBe(true);
  }, 180_000);

  it('OpenCode runs inside the sandbox through the gateway (Chat Completions) and edits the file', async () => {
    const hostBinary = await ensureAgentOnHost(OPENCODE_RECIPE.source as NpmHostSource, AGENT_CACHE_DIR);
    const { result, calc, records } = await run(
      await registry.create('opencode'),
      'opencode-fix',
      { wallTimeMs: 120_000 },
      {
        readOnlyBinds: [{ hostPath: dirname(hostBinary), path: dirname(OPENCODE_RECIPE.sandboxBinaryPath) }],
      },
    );
    expect(result.outcome, `${result.message}\n${JSON.stringify(result.extra).slice(0, 3000)}`).toBe(
      'submitted',
    );
    expect(calc).toContain('return a + b');
    expect(result.submission).toBe('Fixed with opencode.');
    expect(records.some((record) => record.api === 'chat.completions')).toBe(true);
  }, 180_000);

  it('Claude Code runs inside the sandbox through the gateway (Messages translated to Chat Completions) and edits the file', async () => {
    const hostBinary = await ensureAgentOnHost(CLAUDE_CODE_RECIPE.source as NpmHostSource, AGENT_CACHE_DIR);
    const { result, calc, records } = await run(
      await registry.create('claude-code'),
      'claude-fix',
      { wallTimeMs: 120_000 },
      {
        readOnlyBinds: [
          { hostPath: dirname(hostBinary), path: dirname(CLAUDE_CODE_RECIPE.sandboxBinaryPath) },
        ],
      },
    );
    expect(result.outcome, `${result.message}\n${JSON.stringify(result.extra).slice(0, 3000)}`).toBe(
      'submitted',
    );
    expect(calc).toContain('return a + b');
    expect(result.submission).toBe('Fixed with Claude Code.');
    expect(result.trajectory.find((step) => step.action?.tool === 'Bash')).toMatchObject({
      action: { arguments: { command: "sed -i 's/a - b/a + b/' calc.py" } },
    });
    const agentCalls = records.filter((record) =>
      Array.isArray((record.request as { tools?: unknown }).tools),
    );
    expect(agentCalls.length).toBeGreaterThanOrEqual(2);
    expect(records.every((record) => record.api === 'messages' && record.status === 'ok')).toBe(true);
    expect(agentCalls.at(-1)).toMatchObject({
      upstreamApi: 'chat.completions',
      response: { content: [{ type: 'text', text: 'Fixed with Claude Code.' }] },
    });
  }, 180_000);

  it('Claude Code through a vLLM-style upstream: every call records its token ids, and an injected drift is flagged', async () => {
    const hostBinary = await ensureAgentOnHost(CLAUDE_CODE_RECIPE.source as NpmHostSource, AGENT_CACHE_DIR);
    const { result, calc, records } = await run(
      await registry.create('claude-code'),
      'claude-tokens',
      { wallTimeMs: 150_000 },
      {
        readOnlyBinds: [
          { hostPath: dirname(hostBinary), path: dirname(CLAUDE_CODE_RECIPE.sandboxBinaryPath) },
        ],
      },
      { upstream: { baseUrl: model.baseUrl, model: 'scripted', requestTokenIds: true } },
    );
    expect(result.outcome, `${result.message}\n${JSON.stringify(result.extra).slice(0, 3000)}`).toBe(
      'submitted',
    );
    expect(calc).toContain('return a + b');
    expect(result.submission).toBe('Fixed with exact tokens.');
    type Tokens = { promptTokenIds: number[]; completionTokenIds: number[]; completionLogprobs: number[] };
    // Every model call, side calls too, asked for and recorded its ids.
    const calls = records.filter((record) => record.api === 'messages');
    for (const record of calls) {
      expect(record.upstreamRequest).toMatchObject({ return_token_ids: true, logprobs: true });
      const tokens = record.tokens as Tokens;
      expect(tokens.completionTokenIds.length).toBeGreaterThan(0);
      expect(tokens.completionLogprobs).toHaveLength(tokens.completionTokenIds.length);
    }
    const steps = calls.filter((record) => Array.isArray((record.request as { tools?: unknown }).tools));
    expect(steps.length).toBeGreaterThanOrEqual(3);
    const [first, drifted, last] = steps.slice(-3) as [
      Record<string, unknown>,
      Record<string, unknown>,
      Record<string, unknown>,
    ];
    // The step the script re-tokenised departs from the first step's tokens where its answer begins.
    expect(drifted.tokenDrift).toMatchObject({
      previousIndex: first.index,
      matchingTokens: (first.tokens as Tokens).promptTokenIds.length,
    });
    // The last step continues the first one's tokens again, as the policy produced them.
    const firstIds = [
      ...(first.tokens as Tokens).promptTokenIds,
      ...(first.tokens as Tokens).completionTokenIds,
    ];
    expect((last.tokens as Tokens).promptTokenIds.slice(0, firstIds.length)).toEqual(firstIds);
    // Nothing the gateway added reached Claude Code.
    for (const record of calls) expect(JSON.stringify(record.response)).not.toMatch(/token_ids|logprob/);
  }, 200_000);

  it('Claude Code through the gateway to an Anthropic upstream: Messages forwarded as they are', async () => {
    const hostBinary = await ensureAgentOnHost(CLAUDE_CODE_RECIPE.source as NpmHostSource, AGENT_CACHE_DIR);
    const { result, calc, records } = await run(
      await registry.create('claude-code'),
      'claude-fix',
      { wallTimeMs: 120_000 },
      {
        readOnlyBinds: [
          { hostPath: dirname(hostBinary), path: dirname(CLAUDE_CODE_RECIPE.sandboxBinaryPath) },
        ],
      },
      { upstream: { baseUrl: model.baseUrl, apiKey: 'anthropic-key', model: 'scripted', api: 'anthropic' } },
    );
    expect(result.outcome, `${result.message}\n${JSON.stringify(result.extra).slice(0, 3000)}`).toBe(
      'submitted',
    );
    expect(calc).toContain('return a + b');
    expect(result.submission).toBe('Fixed with Claude Code.');
    expect(records.length).toBeGreaterThanOrEqual(2);
    expect(records.every((record) => record.api === 'messages' && record.upstreamApi === undefined)).toBe(
      true,
    );
    expect(model.requests.at(-1)).toMatchObject({
      path: '/v1/messages',
      headers: { 'x-api-key': 'anthropic-key' },
    });
  }, 180_000);

  it('Qwen Code, a Node program, runs with its own Node and fixes the file through the gateway', async () => {
    // Installed from the npm registry beside Node's official build on the host (cached), and
    // bind-mounted read-only. (Without the bind the harness copies the packed folder in and
    // unpacks it there: seen passing for Pi, whose harness run took 24 s that way here.)
    const onHost = await ensureNodeAgentOnHost(QWEN_CODE_RECIPE.source as NpmNodeSource, AGENT_CACHE_DIR);
    const { result, calc, records } = await run(
      await registry.create('qwen-code'),
      'qwen-fix',
      { wallTimeMs: 150_000 },
      { readOnlyBinds: [{ hostPath: onHost.dir, path: dirname(QWEN_CODE_RECIPE.sandboxBinaryPath) }] },
    );
    expect(result.outcome, `${result.message}\n${JSON.stringify(result.extra).slice(0, 3000)}`).toBe(
      'submitted',
    );
    expect(calc).toContain('return a + b');
    expect(result.submission).toBe('Fixed with Qwen Code.');
    expect(result.trajectory.find((step) => step.action?.tool === 'run_shell_command')).toMatchObject({
      observation: expect.stringContaining('Exit Code: 0'),
    });
    expect(records.filter((record) => record.api === 'chat.completions').length).toBeGreaterThanOrEqual(3);
  }, 240_000);

  it('Pi, a Node program with dependencies, runs with its own Node and fixes the file through the gateway', async () => {
    const onHost = await ensureNodeAgentOnHost(PI_RECIPE.source as NpmNodeSource, AGENT_CACHE_DIR);
    const { result, calc, records } = await run(
      await registry.create('pi'),
      'pi-fix',
      { wallTimeMs: 150_000 },
      { readOnlyBinds: [{ hostPath: onHost.dir, path: dirname(PI_RECIPE.sandboxBinaryPath) }] },
    );
    expect(result.outcome, `${result.message}\n${JSON.stringify(result.extra).slice(0, 3000)}`).toBe(
      'submitted',
    );
    expect(calc).toContain('return a + b');
    expect(result.submission).toBe('Fixed with Pi.');
    expect(result.trajectory.find((step) => step.action?.tool === 'bash')).toMatchObject({ exitCode: 0 });
    expect(records.filter((record) => record.api === 'chat.completions').length).toBeGreaterThanOrEqual(2);
  }, 300_000);
});
