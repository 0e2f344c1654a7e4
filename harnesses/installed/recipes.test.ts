import { readFile } from 'node:fs/promises';
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { extractActions, submissionOf } from '../mini-swe/mini-swe.ts';
import { HarnessRegistry } from '../registry.ts';
import { CLAUDE_CODE_RECIPE, parseClaudeCodeEvents } from './claude-code.ts';
import { CODEX_RECIPE, codexConfig, parseCodexEvents } from './codex.ts';
import {
  type AgentRunSettings,
  type NpmHostSource,
  type NpmNodeSource,
  nodeLauncher,
  parsePlatformProbe,
} from './installed-agent.ts';
import { MINI_SWE_AGENT_RECIPE, parseMiniSweAgentTrajectory } from './mini-swe-agent.ts';
import { OPENCODE_RECIPE, opencodeConfig } from './opencode.ts';
import { PI_RECIPE, parsePiEvents } from './pi.ts';
import { QWEN_CODE_RECIPE } from './qwen-code.ts';

const settings: AgentRunSettings = {
  baseUrl: 'http://127.0.0.1:4000/v1/gateway/ro-1/v1',
  apiKey: 'gym-ro-key',
  model: 'policy "v1"',
  workdir: '/work/repo',
  instruction: 'Fix the bug.',
  homeDir: '/tmp/gym-agent-x',
};

describe('agent CLI recipes', () => {
  it('Codex: a custom Responses provider on the gateway, run headless without its own sandbox', () => {
    const config = codexConfig(settings);
    expect(config).toContain('model = "policy \\"v1\\""');
    expect(config).toContain('base_url = "http://127.0.0.1:4000/v1/gateway/ro-1/v1"');
    expect(config).toContain('wire_api = "responses"');
    expect(config).toContain('web_search = "disabled"');
    expect(config).toContain('env_key = "GYM_MODEL_API_KEY"');
    expect(CODEX_RECIPE.configure(settings).env).toEqual({
      CODEX_HOME: '/tmp/gym-agent-x',
      GYM_MODEL_API_KEY: 'gym-ro-key',
    });
    expect(CODEX_RECIPE.command(settings)).toEqual([
      '/opt/gym-agents/codex/codex',
      'exec',
      '--json',
      '--dangerously-bypass-approvals-and-sandbox',
      '--skip-git-repo-check',
      '--ephemeral',
      '-C',
      '/work/repo',
      'Fix the bug.',
    ]);
  });

  it('Codex: turns its JSONL events into a trajectory and notices a failed turn', () => {
    const parsed = parseCodexEvents(
      [
        '{"type":"thread.started","thread_id":"t"}',
        '{"type":"item.completed","item":{"type":"command_execution","command":"ls","aggregated_output":"a\\n","exit_code":0}}',
        'not json',
        '{"type":"item.completed","item":{"type":"agent_message","text":"done"}}',
      ].join('\n'),
    );
    expect(parsed.finalMessage).toBe('done');
    expect(parsed.steps[0]).toMatchObject({
      action: { tool: 'exec_command', arguments: { command: 'ls' } },
      observation: 'a\n',
      exitCode: 0,
    });
    expect(parseCodexEvents('{"type":"turn.failed","error":{"message":"stream closed"}}').error).toBe(
      'stream closed',
    );
  });

  it('OpenCode: an OpenAI-compatible provider with tool calling on the gateway', () => {
    const config = JSON.parse(opencodeConfig(settings));
    expect(config.provider.gym).toMatchObject({
      npm: '@ai-sdk/openai-compatible',
      options: { baseURL: settings.baseUrl, apiKey: '{env:GYM_MODEL_API_KEY}' },
    });
    expect(config.provider.gym.models[settings.model].tool_call).toBe(true);
    expect(OPENCODE_RECIPE.command(settings)).toEqual([
      '/opt/gym-agents/opencode/opencode',
      'run',
      '--format',
      'json',
      '-m',
      `gym/${settings.model}`,
      'Fix the bug.',
    ]);
    expect(OPENCODE_RECIPE.configure(settings).env).toMatchObject({
      OPENCODE_DISABLE_MODELS_FETCH: '1',
      GYM_MODEL_API_KEY: 'gym-ro-key',
    });
  });

  it('mini-swe-agent 2.x: mini in yolo mode through litellm, on the runtime made from its lock', () => {
    expect(MINI_SWE_AGENT_RECIPE.source).toEqual({
      kind: 'python-host',
      name: 'mini-swe-agent',
      version: '2.4.6',
      lockFile: 'mini-swe-agent.lock',
      launchers: { mini: ['-m', 'minisweagent'] },
    });
    expect(MINI_SWE_AGENT_RECIPE.command(settings)).toEqual([
      '/opt/gym-agents/mini-swe-agent/bin/mini',
      '-y',
      '--exit-immediately',
      '-m',
      `openai/${settings.model}`,
      '-l',
      '0',
      '-o',
      '/tmp/gym-agent-x/trajectory.json',
      '-t',
      'Fix the bug.',
    ]);
    expect(MINI_SWE_AGENT_RECIPE.configure(settings).env).toMatchObject({
      OPENAI_API_BASE: settings.baseUrl,
      OPENAI_API_KEY: 'gym-ro-key',
      MSWEA_CONFIGURED: 'true',
      LITELLM_LOCAL_MODEL_COST_MAP: 'True',
    });
  });

  it('mini-swe-agent 2.x: its own trajectory file (as 2.4.6 wrote it) read into steps', async () => {
    // Written by the real mini 2.4.6 against the scripted model: a reply without a tool call, a
    // read, an edit that exits 3, the submission.
    const text = await readFile(
      new URL('./fixtures/mini-swe-agent-2.4.6.trajectory.json', import.meta.url),
      'utf8',
    );
    const parsed = parseMiniSweAgentTrajectory(text);
    expect(parsed.error).toBeNull();
    expect(parsed.finalMessage).toBe('');
    expect(
      parsed.steps.map((step) => [step.assistant, step.action?.arguments.command, step.exitCode]),
    ).toEqual([
      ['Reading without a tool.', undefined, undefined],
      ['Sorry.', 'cat calc.py', 0],
      ['The operator is wrong.', "sed -i 's/a - b/a + b/' calc.py && exit 3", 3],
      // mini ends on the sentinel before its observation is made: "action was not executed", -1.
      ['Done.', 'echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT', -1],
    ]);
    expect(parsed.steps[0]!.error).toContain('No tool calls found');
    expect(parsed.steps[1]!.observation).toContain('return a - b');
    expect(parsed.steps.map((step) => step.index)).toEqual([0, 1, 2, 3]);
    const stopped = JSON.parse(text);
    stopped.info.exit_status = 'LimitsExceeded';
    expect(parseMiniSweAgentTrajectory(JSON.stringify(stopped)).error).toBe(
      'mini-swe-agent ended with LimitsExceeded',
    );
    expect(parseMiniSweAgentTrajectory('').error).toBe('mini-swe-agent wrote no trajectory');
  });

  it('Claude Code: headless stream-json on the gateway, its tool calls and results a trajectory', () => {
    expect(CLAUDE_CODE_RECIPE.configure(settings).env).toMatchObject({
      // Claude Code appends /v1/messages itself.
      ANTHROPIC_BASE_URL: 'http://127.0.0.1:4000/v1/gateway/ro-1',
      ANTHROPIC_API_KEY: 'gym-ro-key',
      ANTHROPIC_MODEL: settings.model,
      ANTHROPIC_DEFAULT_HAIKU_MODEL: settings.model,
      CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
      IS_SANDBOX: '1',
    });
    expect(CLAUDE_CODE_RECIPE.command(settings)).toEqual([
      '/opt/gym-agents/claude-code/claude',
      '-p',
      '--verbose',
      '--output-format',
      'stream-json',
      '--permission-mode',
      'bypassPermissions',
      '--model',
      settings.model,
      'Fix the bug.',
    ]);
    const lines = [
      '{"type":"system","subtype":"init","session_id":"s","tools":["Bash"]}',
      '{"type":"assistant","message":{"content":[{"type":"text","text":"Looking."},{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}]}}',
      '{"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"t1","content":[{"type":"text","text":"calc.py"}]}]}}',
      '{"type":"result","subtype":"success","is_error":false,"result":"Done.","num_turns":2}',
    ];
    expect(parseClaudeCodeEvents(lines.join('\n'))).toMatchObject({
      finalMessage: 'Done.',
      error: null,
      steps: [
        { assistant: 'Looking.' },
        { action: { tool: 'Bash', arguments: { command: 'ls' } }, observation: 'calc.py' },
      ],
    });
    const stopped = parseClaudeCodeEvents(
      '{"type":"result","subtype":"error_max_turns","is_error":true,"result":""}',
    );
    expect(stopped.error).toContain('error_max_turns');
    expect(parseClaudeCodeEvents('Invalid API key').error).toBe('claude printed no result line');
  });

  it('Qwen Code: Chat Completions on the gateway from the environment, launched with its own Node', () => {
    const { files, env } = QWEN_CODE_RECIPE.configure(settings);
    expect(env).toMatchObject({
      OPENAI_BASE_URL: settings.baseUrl,
      OPENAI_API_KEY: 'gym-ro-key',
      OPENAI_MODEL: settings.model,
    });
    expect(files[0]?.path).toBe('/tmp/gym-agent-x/.qwen/settings.json');
    expect(JSON.parse(files[0]!.content)).toMatchObject({ privacy: { usageStatisticsEnabled: false } });
    expect(QWEN_CODE_RECIPE.command(settings)).toEqual([
      '/opt/gym-agents/qwen-code/run',
      '--auth-type',
      'openai',
      '--approval-mode',
      'yolo',
      '--output-format',
      'stream-json',
      '--model',
      settings.model,
      'Fix the bug.',
    ]);
    expect(nodeLauncher(QWEN_CODE_RECIPE.source as NpmNodeSource)).toBe(
      '#!/bin/sh\nd=$(dirname "$(readlink -f "$0")")\nexec "$d/runtime/node" "$d/lib/node_modules/@qwen-code/qwen-code/cli-entry.js" "$@"\n',
    );
    expect(QWEN_CODE_RECIPE.parse('{"type":"result","subtype":"success","result":"ok"}', {})).toMatchObject({
      finalMessage: 'ok',
      error: null,
    });
  });

  it('Pi: a Chat Completions provider on the gateway, its JSON events a trajectory', () => {
    const { files, env } = PI_RECIPE.configure(settings);
    expect(files[0]?.path).toBe('/tmp/gym-agent-x/pi-agent/models.json');
    expect(JSON.parse(files[0]!.content).providers.gym).toEqual({
      baseUrl: settings.baseUrl,
      api: 'openai-completions',
      apiKey: '$GYM_MODEL_API_KEY',
      models: [{ id: settings.model }],
    });
    expect(env).toMatchObject({
      PI_CODING_AGENT_DIR: '/tmp/gym-agent-x/pi-agent',
      GYM_MODEL_API_KEY: 'gym-ro-key',
    });
    const lines = [
      '{"type":"session","version":3,"id":"s"}',
      '{"type":"message_update","message":{"role":"assistant","content":[]}}',
      '{"type":"message_end","message":{"role":"assistant","content":[{"type":"toolCall","id":"c1","name":"bash","arguments":{"command":"ls"}}],"stopReason":"toolUse"}}',
      '{"type":"tool_execution_end","toolCallId":"c1","toolName":"bash","result":{"content":[{"type":"text","text":"calc.py"}],"structuredContent":{"exit_code":0}},"isError":false}',
      '{"type":"message_end","message":{"role":"assistant","content":[{"type":"text","text":"Done."}],"stopReason":"stop"}}',
      '{"type":"agent_end","messages":[]}',
    ];
    const parsed = parsePiEvents(lines.join('\n'));
    expect(parsed).toMatchObject({
      finalMessage: 'Done.',
      error: null,
      steps: [
        { action: { tool: 'bash', arguments: { command: 'ls' } }, observation: 'calc.py', exitCode: 0 },
        { assistant: 'Done.' },
      ],
    });
    expect(parsed.events).toHaveLength(5);
    expect(
      parsePiEvents(
        '{"type":"message_end","message":{"role":"assistant","content":[],"stopReason":"error","errorMessage":"502"}}',
      ).error,
    ).toBe('pi stopped with error: 502');
    expect(parsePiEvents('').error).toBe('pi printed no agent_end');
  });

  it('agent binaries follow the sandbox platform (uname -m, musl or glibc)', () => {
    expect(parsePlatformProbe('x86_64\nglibc\n')).toEqual({ arch: 'x64', libc: 'glibc' });
    expect(parsePlatformProbe('aarch64\nmusl\n')).toEqual({ arch: 'arm64', libc: 'musl' });
    expect(() => parsePlatformProbe('riscv64\nglibc\n')).toThrow(/riscv64/);
    const binary = (recipe: { source: unknown }, arch: 'x64' | 'arm64', libc: 'glibc' | 'musl') => {
      const source = recipe.source as NpmHostSource;
      return typeof source.binaryInPackage === 'string'
        ? source.binaryInPackage
        : source.binaryInPackage({ arch, libc });
    };
    expect(binary(CLAUDE_CODE_RECIPE, 'arm64', 'musl')).toBe(
      'node_modules/@anthropic-ai/claude-code-linux-arm64-musl/claude',
    );
    expect(binary(CLAUDE_CODE_RECIPE, 'x64', 'glibc')).toBe(
      'node_modules/@anthropic-ai/claude-code-linux-x64/claude',
    );
    expect(binary(CODEX_RECIPE, 'arm64', 'glibc')).toBe(
      'node_modules/@openai/codex-linux-arm64/vendor/aarch64-unknown-linux-musl/bin/codex',
    );
    expect(binary(OPENCODE_RECIPE, 'x64', 'musl')).toBe('node_modules/opencode-linux-x64-musl/bin/opencode');
  });

  it('a preinstalled PyPI agent is named by an absolute path', async () => {
    const registry = new HarnessRegistry();
    await expect(registry.create('mini-swe-agent', { binaryPath: 'mini' })).rejects.toMatchObject({
      code: 'VALIDATION_FAILED',
    });
  });

  it('the registry names its harnesses and refuses an unknown one with the list', async () => {
    const registry = new HarnessRegistry();
    expect(registry.names).toEqual([
      'claude-code',
      'codex',
      'mini-swe',
      'mini-swe-agent',
      'noop',
      'opencode',
      'openhands',
      'oracle',
      'pi',
      'qwen-code',
      'single-turn',
      'tool-calling',
    ]);
    await expect(registry.create('claude-cod')).rejects.toMatchObject({
      code: 'HARNESS_NOT_FOUND',
      details: { available: registry.names },
    });
  });
});

describe('mini-swe protocol helpers', () => {
  it('finds exactly the fenced bash blocks', () => {
    expect(extractActions('Reasoning.\n```bash\nls -la\n```')).toEqual(['ls -la']);
    expect(extractActions('```bash\na\n```\nand\n```bash\nb\n```')).toHaveLength(2);
    expect(extractActions('```python\nprint(1)\n```')).toEqual([]);
  });

  it('reads the blocks as the regex did, in linear time in a reply of line breaks', () => {
    const byRegex = (content: string) =>
      [...content.matchAll(/```bash\s*\n([\s\S]*?)\n```/g)].map((match) => match[1]!.trim());
    fc.assert(
      fc.property(
        fc
          .array(fc.constantFrom('```bash', '```', '\n', '\n```', ' ', '\t', '\r', 'ls', '`'), {
            maxLength: 12,
          })
          .map((parts) => parts.join('')),
        (content) => {
          expect(extractActions(content)).toEqual(byRegex(content));
        },
      ),
      { numRuns: 5000 },
    );
    // The regex took 13 s on 200,000 line breaks after an opener (quadratic); a policy can send that.
    const breaks = '\n'.repeat(1_000_000);
    expect(extractActions(`\`\`\`bash${breaks}`)).toEqual([]);
    expect(extractActions(`\`\`\`bash${breaks}ls${breaks}\`\`\``)).toEqual(['ls']);
  });

  it('submits only when the first output line is the sentinel and the command succeeded', () => {
    expect(submissionOf('\nCOMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\ndiff --git a/x b/x\n', 0)).toBe(
      'diff --git a/x b/x\n',
    );
    expect(submissionOf('COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n', 1)).toBeNull();
    expect(submissionOf('echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\n', 0)).toBeNull();
  });
});
