/**
 * OpenCode (`opencode-ai`), headless: `opencode run --format json`, with a custom
 * OpenAI-compatible provider (Chat Completions) pointing at the rollout's gateway. Its binary
 * comes in glibc and musl builds; the harness picks the sandbox's.
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

export const OPENCODE_VERSION = '1.18.33';

export function opencodeConfig(settings: AgentRunSettings): string {
  return `${JSON.stringify(
    {
      provider: {
        gym: {
          npm: '@ai-sdk/openai-compatible',
          name: 'gym gateway',
          options: { baseURL: settings.baseUrl, apiKey: '{env:GYM_MODEL_API_KEY}' },
          // tool_call: without it OpenCode treats the model as unable to call tools and sends none.
          models: {
            [settings.model]: {
              name: settings.model,
              tool_call: true,
              limit: { context: 128_000, output: 16_384 },
            },
          },
        },
      },
      model: `gym/${settings.model}`,
      autoupdate: false,
      share: 'disabled',
    },
    null,
    2,
  )}\n`;
}

export function parseOpencodeEvents(stdout: string): ParsedRun {
  const events = parseJsonLines(stdout);
  const steps: TrajectoryStep[] = [];
  let finalMessage: string | null = null;
  let error: string | null = null;
  for (const event of events) {
    const part = (event.part ?? {}) as Record<string, unknown>;
    if (event.type === 'text' && typeof part.text === 'string') {
      finalMessage = part.text;
      logStep(steps, {
        assistant: part.text,
      });
    } else if (event.type === 'tool_use') {
      const state = (part.state ?? {}) as Record<string, unknown>;
      const metadata = (state.metadata ?? {}) as Record<string, unknown>;
      logStep(steps, {
        action: {
          tool: String(part.tool ?? 'tool'),
          arguments: (state.input ?? {}) as Record<string, unknown>,
        },
        observation: typeof state.output === 'string' ? state.output : '',
        exitCode: typeof metadata.exit === 'number' ? metadata.exit : null,
      });
    } else if (event.type === 'error') {
      error = JSON.stringify(event.error ?? part);
    }
  }
  return { finalMessage, steps, error, events };
}

export const OPENCODE_RECIPE: InstalledAgentRecipe = {
  name: 'opencode',
  source: {
    kind: 'npm-host',
    npmPackage: 'opencode-ai',
    version: OPENCODE_VERSION,
    binaryInPackage: ({ arch, libc }) =>
      `node_modules/opencode-linux-${arch}${libc === 'musl' ? '-musl' : ''}/bin/opencode`,
  },
  sandboxBinaryPath: '/opt/gym-agents/opencode/opencode',
  configure: (settings) => ({
    files: [{ path: `${settings.homeDir}/config/opencode/opencode.json`, content: opencodeConfig(settings) }],
    env: {
      XDG_CONFIG_HOME: `${settings.homeDir}/config`,
      XDG_DATA_HOME: `${settings.homeDir}/data`,
      XDG_CACHE_HOME: `${settings.homeDir}/cache`,
      XDG_STATE_HOME: `${settings.homeDir}/state`,
      GYM_MODEL_API_KEY: settings.apiKey,
      // No models.dev catalogue fetch: the sandbox reaches nothing but the gateway.
      OPENCODE_DISABLE_MODELS_FETCH: '1',
      OPENCODE_DISABLE_AUTOUPDATE: '1',
    },
  }),
  command: (settings) => [
    OPENCODE_RECIPE.sandboxBinaryPath,
    'run',
    '--format',
    'json',
    '-m',
    `gym/${settings.model}`,
    settings.instruction,
  ],
  parse: (stdout) => parseOpencodeEvents(stdout),
};

export function createOpencodeHarness(options: unknown = {}) {
  return createInstalledAgentHarness(OPENCODE_RECIPE, options as InstalledAgentOptions);
}
