/**
 * Qwen Code (`@qwen-code/qwen-code`), headless: `qwen --output-format stream-json
 * --approval-mode yolo PROMPT`, its OpenAI-compatible provider (Chat Completions) pointed at the
 * rollout's gateway through `OPENAI_BASE_URL` / `OPENAI_API_KEY` / `OPENAI_MODEL`. It is a Node
 * program: the harness brings Node along (see `NpmNodeSource`), so it runs in glibc images.
 */
import { parseClaudeCodeEvents } from './claude-code.ts';
import {
  type AgentRunSettings,
  createInstalledAgentHarness,
  type InstalledAgentOptions,
  type InstalledAgentRecipe,
} from './installed-agent.ts';

export const QWEN_CODE_VERSION = '0.24.4';

/** User settings: no usage statistics, no update checks (the sandbox reaches only the gateway). */
export function qwenSettings(): string {
  return `${JSON.stringify(
    {
      privacy: { usageStatisticsEnabled: false },
      general: { enableAutoUpdate: false, disableUpdateNag: true },
    },
    null,
    2,
  )}\n`;
}

export const QWEN_CODE_RECIPE: InstalledAgentRecipe = {
  name: 'qwen-code',
  source: {
    kind: 'npm-node',
    npmPackage: '@qwen-code/qwen-code',
    version: QWEN_CODE_VERSION,
    entry: 'cli-entry.js',
  },
  sandboxBinaryPath: '/opt/gym-agents/qwen-code/run',
  configure: (settings: AgentRunSettings) => ({
    // Written into HOME, which Qwen Code needs to exist.
    files: [{ path: `${settings.homeDir}/.qwen/settings.json`, content: qwenSettings() }],
    env: {
      OPENAI_BASE_URL: settings.baseUrl,
      OPENAI_API_KEY: settings.apiKey,
      OPENAI_MODEL: settings.model,
      QWEN_CODE_SUPPRESS_YOLO_WARNING: '1',
    },
  }),
  command: (settings) => [
    QWEN_CODE_RECIPE.sandboxBinaryPath,
    '--auth-type',
    'openai',
    '--approval-mode',
    'yolo',
    '--output-format',
    'stream-json',
    '--model',
    settings.model,
    settings.instruction,
  ],
  parse: (stdout) => parseClaudeCodeEvents(stdout, 'qwen'),
};

export function createQwenCodeHarness(options: unknown = {}) {
  return createInstalledAgentHarness(QWEN_CODE_RECIPE, options as InstalledAgentOptions);
}
