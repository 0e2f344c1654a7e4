/**
 * Pi (`@earendil-works/pi-coding-agent`), headless: `pi --mode json --no-session`, with a custom
 * provider in `$PI_CODING_AGENT_DIR/models.json` speaking Chat Completions to the rollout's
 * gateway (its key read from the environment: `$NAME` in `apiKey`). A Node program with
 * dependencies: the harness brings it and Node along (see `NpmNodeSource`), so glibc images.
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

export const PI_VERSION = '1.6.0';

export function piModels(settings: AgentRunSettings): string {
  return `${JSON.stringify(
    {
      providers: {
        gym: {
          baseUrl: settings.baseUrl,
          api: 'openai-completions',
          apiKey: '$GYM_MODEL_API_KEY',
          models: [{ id: settings.model }],
        },
      },
    },
    null,
    2,
  )}\n`;
}

type Json = Record<string, unknown>;

const textOf = (content: unknown): string =>
  Array.isArray(content)
    ? (content as Json[]).map((part) => (typeof part.text === 'string' ? part.text : '')).join('')
    : typeof content === 'string'
      ? content
      : '';

/**
 * Pi's JSON events as a trajectory: each finished assistant message (`message_end`) gives its
 * text and tool calls as steps, each `tool_execution_end` the matching call's observation; the
 * last assistant text is the final message. An assistant message that stopped with `error` or
 * `aborted`, or a run without `agent_end`, is the agent's error.
 */
export function parsePiEvents(stdout: string): ParsedRun {
  // message_update lines repeat the growing message: they are dropped from the kept events.
  const events = parseJsonLines(stdout).filter((event) => event.type !== 'message_update');
  const steps: TrajectoryStep[] = [];
  const byCallId = new Map<string, TrajectoryStep>();
  let finalMessage: string | null = null;
  let error: string | null = null;
  let hasEnded = false;
  for (const event of events) {
    if (event.type === 'message_end') {
      const message = (event.message ?? {}) as Json;
      if (message.role !== 'assistant') continue;
      for (const part of Array.isArray(message.content) ? (message.content as Json[]) : []) {
        if (part.type === 'text' && typeof part.text === 'string' && part.text !== '') {
          logStep(steps, { assistant: part.text });
          finalMessage = part.text;
        } else if (part.type === 'toolCall') {
          logStep(steps, {
            action: { tool: String(part.name ?? 'tool'), arguments: (part.arguments ?? {}) as Json },
          });
          byCallId.set(String(part.id), steps.at(-1)!);
        }
      }
      if (message.stopReason === 'error' || message.stopReason === 'aborted')
        error = `pi stopped with ${String(message.stopReason)}: ${String(message.errorMessage ?? '')}`.trim();
    } else if (event.type === 'tool_execution_end') {
      const step = byCallId.get(String(event.toolCallId));
      if (step === undefined) continue;
      const result = (event.result ?? {}) as Json;
      step.observation = textOf(result.content);
      const exitCode = (result.structuredContent as Json | undefined)?.exit_code;
      if (typeof exitCode === 'number') step.exitCode = exitCode;
      if (event.isError === true) step.error = step.observation;
    } else if (event.type === 'agent_end') hasEnded = true;
  }
  if (!hasEnded && error === null) error = 'pi printed no agent_end';
  return { finalMessage, steps, error, events };
}

export const PI_RECIPE: InstalledAgentRecipe = {
  name: 'pi',
  source: {
    kind: 'npm-node',
    npmPackage: '@earendil-works/pi-coding-agent',
    version: PI_VERSION,
    entry: 'dist/bundle/cli.js',
  },
  sandboxBinaryPath: '/opt/gym-agents/pi/run',
  configure: (settings) => ({
    files: [{ path: `${settings.homeDir}/pi-agent/models.json`, content: piModels(settings) }],
    env: {
      PI_CODING_AGENT_DIR: `${settings.homeDir}/pi-agent`,
      GYM_MODEL_API_KEY: settings.apiKey,
      // No version check or telemetry: the sandbox reaches only the gateway.
      PI_SKIP_VERSION_CHECK: '1',
      PI_OFFLINE: '1',
      PI_TELEMETRY: '0',
    },
  }),
  command: (settings) => [
    PI_RECIPE.sandboxBinaryPath,
    '--mode',
    'json',
    '--no-session',
    '--provider',
    'gym',
    '--model',
    settings.model,
    settings.instruction,
  ],
  parse: (stdout) => parsePiEvents(stdout),
};

export function createPiHarness(options: unknown = {}) {
  return createInstalledAgentHarness(PI_RECIPE, options as InstalledAgentOptions);
}
