/**
 * Agents distributed on PyPI: mini-swe-agent and OpenHands. Our machines cannot reach PyPI, so
 * these adapters are built from the tools' documented CLIs and tested only for the command lines
 * and configuration they produce; they are not exercised end to end here (see the README).
 * They install inside the sandbox with pip, so the sandbox needs a route to the package index
 * (network `bridge`) or an image that already has the agent.
 */
import type { TrajectoryStep } from '../harness.ts';
import {
  createInstalledAgentHarness,
  type InstalledAgentOptions,
  type InstalledAgentRecipe,
  type ParsedRun,
  parseJsonLines,
} from './installed-agent.ts';

/** mini-swe-agent's `mini`, v1 line: `-y` (no confirmations), `--exit-immediately`, `-o` trajectory, model through litellm's OpenAI route. */
export const MINI_SWE_AGENT_RECIPE: InstalledAgentRecipe = {
  name: 'mini-swe-agent',
  source: { kind: 'in-sandbox', installCommand: "python3 -m pip install --quiet 'mini-swe-agent>=1.9,<2'" },
  sandboxBinaryPath: '/usr/local/bin/mini',
  configure: (settings) => ({
    files: [],
    env: {
      OPENAI_API_BASE: settings.baseUrl,
      OPENAI_BASE_URL: settings.baseUrl,
      OPENAI_API_KEY: settings.apiKey,
      // Skip the first-run configuration prompt, and do not fail on a model without a price.
      MSWEA_CONFIGURED: 'true',
      MSWEA_COST_TRACKING: 'ignore_errors',
    },
  }),
  command: (settings) => [
    'mini',
    '-y',
    '--exit-immediately',
    '-m',
    `openai/${settings.model}`,
    '-l',
    '0',
    '-o',
    `${settings.homeDir}/trajectory.json`,
    '-t',
    settings.instruction,
  ],
  resultFiles: (settings) => [`${settings.homeDir}/trajectory.json`],
  parse: (_stdout, files) => {
    const text = Object.values(files)[0] ?? '';
    if (text === '')
      return { finalMessage: null, steps: [], error: 'mini-swe-agent wrote no trajectory', events: [] };
    const trajectory = JSON.parse(text) as {
      info?: { exit_status?: string; submission?: string };
      messages?: Array<{ role: string; content: unknown }>;
    };
    const steps: TrajectoryStep[] = (trajectory.messages ?? [])
      .filter((message) => message.role === 'assistant')
      .map((message, index) => ({ index, startedAt: '', durationMs: 0, assistant: String(message.content) }));
    const status = trajectory.info?.exit_status ?? 'unknown';
    return {
      finalMessage: trajectory.info?.submission ?? null,
      steps,
      error: status === 'Submitted' ? null : `mini-swe-agent ended with ${status}`,
      events: trajectory.messages ?? [],
    };
  },
};

/** OpenHands CLI v1 headless: `openhands --headless --json -t TASK`, the LLM from env with `--override-with-envs`. */
export const OPENHANDS_RECIPE: InstalledAgentRecipe = {
  name: 'openhands',
  source: { kind: 'in-sandbox', installCommand: 'python3 -m pip install --quiet openhands' },
  sandboxBinaryPath: '/usr/local/bin/openhands',
  configure: (settings) => ({
    files: [],
    env: {
      LLM_MODEL: `openai/${settings.model}`,
      LLM_BASE_URL: settings.baseUrl,
      LLM_API_KEY: settings.apiKey,
    },
  }),
  command: (settings) => [
    'openhands',
    '--headless',
    '--json',
    '--override-with-envs',
    '-t',
    settings.instruction,
  ],
  parse: (stdout): ParsedRun => {
    const events = parseJsonLines(stdout);
    const steps: TrajectoryStep[] = events
      .filter((event) => event.type === 'action')
      .map((event, index) => ({
        index,
        startedAt: '',
        durationMs: 0,
        action: { tool: String(event.action ?? 'action'), arguments: event },
      }));
    const last = [...events]
      .reverse()
      .find((event) => typeof event.message === 'string' || typeof event.content === 'string');
    return {
      finalMessage: last === undefined ? null : String(last.message ?? last.content),
      steps,
      error: null,
      events,
    };
  },
};

export const createMiniSweAgentHarness = (options: unknown = {}) =>
  createInstalledAgentHarness(MINI_SWE_AGENT_RECIPE, options as InstalledAgentOptions);
export const createOpenHandsHarness = (options: unknown = {}) =>
  createInstalledAgentHarness(OPENHANDS_RECIPE, options as InstalledAgentOptions);
