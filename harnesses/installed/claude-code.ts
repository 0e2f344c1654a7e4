/**
 * Claude Code (`@anthropic-ai/claude-code`), headless: `claude -p --verbose --output-format
 * stream-json`, with permissions bypassed (the sandbox is the boundary), pointed at the rollout's
 * gateway through `ANTHROPIC_BASE_URL` (the gateway speaks Anthropic Messages and translates them
 * for an OpenAI-compatible policy). Its native binary (from the platform package the npm package
 * depends on) needs glibc, or musl on Alpine: the harness picks the one for the sandbox.
 */
import type { TrajectoryStep } from '../harness.ts';
import {
  type AgentRunSettings,
  createInstalledAgentHarness,
  type InstalledAgentOptions,
  type InstalledAgentRecipe,
  logStep,
  type ParsedRun,
  parseJsonLines,
} from './installed-agent.ts';

export const CLAUDE_CODE_VERSION = '2.1.332';

/** The gateway as Claude Code wants it: without the trailing `/v1` (it appends `/v1/messages`). */
export function anthropicBaseUrl(baseUrl: string): string {
  return baseUrl.replace(/\/v1\/?$/, '');
}

export function claudeCodeEnv(settings: AgentRunSettings): Record<string, string> {
  return {
    ANTHROPIC_BASE_URL: anthropicBaseUrl(settings.baseUrl),
    ANTHROPIC_API_KEY: settings.apiKey,
    ANTHROPIC_MODEL: settings.model,
    // Background and sub-agent calls would otherwise ask for other model names.
    ANTHROPIC_DEFAULT_SONNET_MODEL: settings.model,
    ANTHROPIC_DEFAULT_OPUS_MODEL: settings.model,
    ANTHROPIC_DEFAULT_HAIKU_MODEL: settings.model,
    ANTHROPIC_SMALL_FAST_MODEL: settings.model,
    CLAUDE_CODE_SUBAGENT_MODEL: settings.model,
    // No telemetry, update checks or other calls beside the model's: the sandbox reaches only the gateway.
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
    DISABLE_AUTOUPDATER: '1',
    // Allows bypassing permissions as root (inside a sandbox, where that is the point).
    IS_SANDBOX: '1',
    CLAUDE_CONFIG_DIR: `${settings.homeDir}/claude`,
  };
}

type Json = Record<string, unknown>;

/**
 * Claude Code's stream-json lines (Qwen Code prints the same shapes) as a trajectory: each
 * tool_use a step, its tool_result the observation, the `result` line the final message.
 */
export function parseClaudeCodeEvents(stdout: string, agent = 'claude'): ParsedRun {
  const events = parseJsonLines(stdout);
  const steps: TrajectoryStep[] = [];
  const byToolUseId = new Map<string, TrajectoryStep>();
  let finalMessage: string | null = null;
  let error: string | null = null;
  let sawResult = false;
  for (const event of events) {
    const message = (event.message ?? {}) as Json;
    const blocks = Array.isArray(message.content) ? (message.content as Json[]) : [];
    if (event.type === 'assistant') {
      for (const block of blocks) {
        if (block.type === 'text' && typeof block.text === 'string' && block.text !== '')
          logStep(steps, { assistant: block.text });
        else if (block.type === 'tool_use') {
          logStep(steps, {
            action: { tool: String(block.name ?? 'tool'), arguments: (block.input ?? {}) as Json },
          });
          byToolUseId.set(String(block.id), steps.at(-1)!);
        }
      }
    } else if (event.type === 'user') {
      for (const block of blocks) {
        if (block.type !== 'tool_result') continue;
        const step = byToolUseId.get(String(block.tool_use_id));
        if (step === undefined) continue;
        const content = block.content;
        step.observation =
          typeof content === 'string'
            ? content
            : Array.isArray(content)
              ? (content as Json[]).map((part) => (typeof part.text === 'string' ? part.text : '')).join('')
              : '';
        if (block.is_error === true) step.error = step.observation;
      }
    } else if (event.type === 'result') {
      sawResult = true;
      if (typeof event.result === 'string') finalMessage = event.result;
      if (event.is_error === true || (event.subtype !== undefined && event.subtype !== 'success'))
        error =
          `claude ended with ${String(event.subtype ?? 'an error')}: ${String(event.result ?? '')}`.trim();
    }
  }
  if (!sawResult && error === null) error = `${agent} printed no result line`;
  return { finalMessage, steps, error, events };
}

const PLATFORM_PACKAGE = {
  x64: { glibc: 'claude-code-linux-x64', musl: 'claude-code-linux-x64-musl' },
  arm64: { glibc: 'claude-code-linux-arm64', musl: 'claude-code-linux-arm64-musl' },
} as const;

export const CLAUDE_CODE_RECIPE: InstalledAgentRecipe = {
  name: 'claude-code',
  source: {
    kind: 'npm-host',
    npmPackage: '@anthropic-ai/claude-code',
    version: CLAUDE_CODE_VERSION,
    binaryInPackage: ({ arch, libc }) => `node_modules/@anthropic-ai/${PLATFORM_PACKAGE[arch][libc]}/claude`,
  },
  sandboxBinaryPath: '/opt/gym-agents/claude-code/claude',
  configure: (settings) => ({ files: [], env: claudeCodeEnv(settings) }),
  command: (settings) => [
    CLAUDE_CODE_RECIPE.sandboxBinaryPath,
    '-p',
    '--verbose',
    '--output-format',
    'stream-json',
    '--permission-mode',
    'bypassPermissions',
    '--model',
    settings.model,
    settings.instruction,
  ],
  parse: (stdout) => parseClaudeCodeEvents(stdout),
};

export function createClaudeCodeHarness(options: unknown = {}) {
  return createInstalledAgentHarness(CLAUDE_CODE_RECIPE, options as InstalledAgentOptions);
}
