/**
 * Codex CLI (`@openai/codex`), headless: `codex exec --json`, configured with a custom model
 * provider pointing at the rollout's gateway. Codex speaks only the Responses API
 * (`wire_api = "responses"`); its static musl binary (x64 or arm64) runs in any Linux image.
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

export const CODEX_VERSION = '0.171.0';

/** TOML basic string: quotes and backslashes escaped. */
function tomlString(value: string): string {
  return `"${value.replaceAll('\\', '\\\\').replaceAll('"', '\\"')}"`;
}

export function codexConfig(settings: AgentRunSettings): string {
  return [
    `model = ${tomlString(settings.model)}`,
    'model_provider = "gym"',
    // Codex offers the model its server-side web search by default; the gateway refuses it.
    'web_search = "disabled"',
    '',
    '[model_providers.gym]',
    'name = "gym gateway"',
    `base_url = ${tomlString(settings.baseUrl)}`,
    'env_key = "GYM_MODEL_API_KEY"',
    'wire_api = "responses"',
    'request_max_retries = 1',
    'stream_max_retries = 1',
    '',
  ].join('\n');
}

export function parseCodexEvents(stdout: string): ParsedRun {
  const events = parseJsonLines(stdout);
  const steps: TrajectoryStep[] = [];
  let finalMessage: string | null = null;
  let error: string | null = null;
  for (const event of events) {
    if (event.type === 'turn.failed')
      error = String((event.error as { message?: string } | undefined)?.message ?? 'turn failed');
    if (event.type !== 'item.completed') continue;
    const item = (event.item ?? {}) as Record<string, unknown>;
    if (item.type === 'agent_message') {
      finalMessage = String(item.text ?? '');
      logStep(steps, {
        assistant: finalMessage,
      });
    } else if (item.type === 'command_execution') {
      logStep(steps, {
        action: { tool: 'exec_command', arguments: { command: item.command } },
        observation: String(item.aggregated_output ?? ''),
        exitCode: typeof item.exit_code === 'number' ? item.exit_code : null,
      });
    } else if (item.type === 'file_change') {
      logStep(steps, {
        action: { tool: 'file_change', arguments: { changes: item.changes } },
      });
    }
  }
  return { finalMessage, steps, error, events };
}

export const CODEX_RECIPE: InstalledAgentRecipe = {
  name: 'codex',
  source: {
    kind: 'npm-host',
    npmPackage: '@openai/codex',
    version: CODEX_VERSION,
    // A static musl binary: it runs on glibc and musl images alike.
    binaryInPackage: ({ arch }) =>
      `node_modules/@openai/codex-linux-${arch}/vendor/${arch === 'x64' ? 'x86_64' : 'aarch64'}-unknown-linux-musl/bin/codex`,
  },
  sandboxBinaryPath: '/opt/gym-agents/codex/codex',
  configure: (settings) => ({
    files: [{ path: `${settings.homeDir}/config.toml`, content: codexConfig(settings) }],
    env: { CODEX_HOME: settings.homeDir, GYM_MODEL_API_KEY: settings.apiKey },
  }),
  command: (settings) => [
    CODEX_RECIPE.sandboxBinaryPath,
    'exec',
    '--json',
    '--dangerously-bypass-approvals-and-sandbox',
    '--skip-git-repo-check',
    '--ephemeral',
    '-C',
    settings.workdir,
    settings.instruction,
  ],
  parse: (stdout) => parseCodexEvents(stdout),
};

export function createCodexHarness(options: unknown = {}) {
  return createInstalledAgentHarness(CODEX_RECIPE, options as InstalledAgentOptions);
}
