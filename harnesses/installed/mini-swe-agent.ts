/**
 * mini-swe-agent (2.x, the current line) as its authors ship it: the real `mini` CLI from PyPI,
 * run inside the sandbox on a Python runtime of its own (`python-runtime.ts`), its model calls
 * through the rollout's gateway (litellm's OpenAI route), its own trajectory file kept and read.
 *
 * In 2.x the default model speaks tool calls: every reply must call the one `bash` tool
 * (`{"command": ...}`); the agent runs each command with `sh -c` in a fresh subshell (30 s each by
 * default) and ends when a command's output starts with `COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`
 * (its prompt: `echo` it alone). The 1.x line (fenced bash blocks) is not kept: our own `mini-swe`
 * harness is that loop.
 */
import type { TrajectoryStep } from '../harness.ts';
import {
  createInstalledAgentHarness,
  type InstalledAgentOptions,
  type InstalledAgentRecipe,
  type ParsedRun,
} from './installed-agent.ts';

export const MINI_SWE_AGENT_VERSION = '2.4.6';

type Json = Record<string, unknown>;

function messageText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content))
    return (content as Json[]).map((part) => (typeof part.text === 'string' ? part.text : '')).join('');
  return '';
}

/** The commands of an assistant message: its parsed actions, else its `bash` tool calls. */
function messageCommands(message: Json): Array<{ command: string; id: string | null }> {
  const actions = ((message.extra as Json | undefined)?.actions ?? null) as Json[] | null;
  if (Array.isArray(actions))
    return actions.map((action) => ({
      command: String(action.command ?? ''),
      id: typeof action.tool_call_id === 'string' ? action.tool_call_id : null,
    }));
  const calls = (message.tool_calls ?? []) as Json[];
  return calls.map((call) => {
    const fn = (call.function ?? {}) as Json;
    let command = '';
    try {
      command = String((JSON.parse(String(fn.arguments ?? '{}')) as Json).command ?? '');
    } catch {
      command = String(fn.arguments ?? '');
    }
    return { command, id: typeof call.id === 'string' ? call.id : null };
  });
}

/**
 * mini-swe-agent's trajectory file (`trajectory_format` `mini-swe-agent-1.1`: `info` with
 * `exit_status` and `submission`, `messages` as sent to the model plus an `exit` message) as our
 * steps: one per command the model asked for, its `tool` message the observation; a reply that
 * was refused for its format is a step with the error fed back.
 */
export function parseMiniSweAgentTrajectory(text: string): ParsedRun {
  if (text === '')
    return { finalMessage: null, steps: [], error: 'mini-swe-agent wrote no trajectory', events: [] };
  const trajectory = JSON.parse(text) as { info?: Json; messages?: Json[] };
  if (typeof trajectory !== 'object' || trajectory === null)
    throw new Error('the trajectory is not an object');
  if (trajectory.messages !== undefined && !Array.isArray(trajectory.messages))
    throw new Error('its messages are not a list');
  const messages = trajectory.messages ?? [];
  const steps: TrajectoryStep[] = [];
  const byCall = new Map<string, TrajectoryStep>();
  let pending: TrajectoryStep[] = [];
  for (const message of messages) {
    const role = message.role;
    if (role === 'assistant') {
      const said = messageText(message.content);
      const commands = messageCommands(message);
      pending = [];
      if (commands.length === 0) {
        steps.push({
          index: steps.length,
          startedAt: '',
          durationMs: 0,
          ...(said === '' ? {} : { assistant: said }),
        });
        continue;
      }
      commands.forEach((call, position) => {
        const step: TrajectoryStep = {
          index: steps.length,
          startedAt: '',
          durationMs: 0,
          ...(position === 0 && said !== '' ? { assistant: said } : {}),
          action: { tool: 'bash', arguments: { command: call.command } },
        };
        steps.push(step);
        pending.push(step);
        if (call.id !== null) byCall.set(call.id, step);
      });
    } else if (role === 'tool') {
      const id = typeof message.tool_call_id === 'string' ? message.tool_call_id : null;
      const step = (id === null ? undefined : byCall.get(id)) ?? pending.shift();
      if (step === undefined) continue;
      step.observation = messageText(message.content);
      const returncode = ((message.extra ?? {}) as Json).returncode;
      if (typeof returncode === 'number') step.exitCode = returncode;
    } else if (role === 'user') {
      const extra = (message.extra ?? {}) as Json;
      if (extra.interrupt_type === 'FormatError') {
        // A reply refused for its format is not in the messages; the error keeps what it said.
        const choices = ((extra.response as Json | undefined)?.choices ?? []) as Json[];
        const said = messageText((choices[0]?.message as Json | undefined)?.content);
        steps.push({
          index: steps.length,
          startedAt: '',
          durationMs: 0,
          ...(said === '' ? {} : { assistant: said }),
          error: messageText(message.content),
        });
        continue;
      }
      // An observation fed back as a user message (the text-based configs).
      const last = steps.at(-1);
      if (last?.action !== undefined && last.observation === undefined)
        last.observation = messageText(message.content);
    }
  }
  const info = trajectory.info ?? {};
  const status = typeof info.exit_status === 'string' ? info.exit_status : 'unknown';
  const submission = typeof info.submission === 'string' ? info.submission : null;
  return {
    finalMessage: submission,
    steps,
    error: status === 'Submitted' ? null : `mini-swe-agent ended with ${status}`,
    events: messages,
  };
}

/** `mini -y --exit-immediately`: no confirmations, no prompt at the end; cost limit off. */
export const MINI_SWE_AGENT_RECIPE: InstalledAgentRecipe = {
  name: 'mini-swe-agent',
  source: {
    kind: 'python-host',
    name: 'mini-swe-agent',
    version: MINI_SWE_AGENT_VERSION,
    lockFile: 'mini-swe-agent.lock',
    launchers: { mini: ['-m', 'minisweagent'] },
  },
  sandboxBinaryPath: '/opt/gym-agents/mini-swe-agent/bin/mini',
  configure: (settings) => ({
    files: [],
    env: {
      OPENAI_API_BASE: settings.baseUrl,
      OPENAI_BASE_URL: settings.baseUrl,
      OPENAI_API_KEY: settings.apiKey,
      // No first-run prompt, no failure for a model without a price, its config under our home.
      MSWEA_CONFIGURED: 'true',
      MSWEA_COST_TRACKING: 'ignore_errors',
      MSWEA_GLOBAL_CONFIG_DIR: `${settings.homeDir}/config`,
      // litellm fetches its price list from the web at import, then falls back to its own copy:
      // the sandbox has no network, so go to the copy at once.
      LITELLM_LOCAL_MODEL_COST_MAP: 'True',
    },
  }),
  command: (settings) => [
    MINI_SWE_AGENT_RECIPE.sandboxBinaryPath,
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
  parse: (_stdout, files) => parseMiniSweAgentTrajectory(Object.values(files)[0] ?? ''),
};

export const createMiniSweAgentHarness = (options: unknown = {}) =>
  createInstalledAgentHarness(MINI_SWE_AGENT_RECIPE, options as InstalledAgentOptions);
