/**
 * OpenHands: the OpenHands SDK agent (openhands-sdk and openhands-tools), the agent the OpenHands
 * CLI runs, with the CLI's default tools (terminal, file editor, task tracker; finish and think
 * built in), driven headless by our runner (python/openhands_headless.py). Not the CLI itself: its
 * releases require Python 3.12 exactly, and the runtime we bring into sandboxes is Debian 13's
 * Python 3.13 (see PythonHostSource). The runner prints each SDK event as a JSON line and writes
 * the run's status and events to a trajectory file; the model is reached through LiteLLM's
 * OpenAI route at the gateway.
 */
import type { TrajectoryStep } from '../harness.ts';
import {
  type AgentRunSettings,
  createInstalledAgentHarness,
  type InstalledAgentOptions,
  type InstalledAgentRecipe,
  type ParsedRun,
  parseJsonLines,
} from './installed-agent.ts';
import type { PythonHostSource } from './python-runtime.ts';

export const OPENHANDS_VERSION = '1.58.2';

type Json = Record<string, unknown>;

/** The text of SDK content: a string, or the text parts of a list of TextContent/ImageContent. */
function sdkText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return (content as Json[]).map((part) => (typeof part?.text === 'string' ? part.text : '')).join('');
}

/** Milliseconds from one SDK timestamp to another (both the sandbox's local time), or 0. */
function elapsedMs(from: unknown, to: unknown): number {
  if (typeof from !== 'string' || typeof to !== 'string') return 0;
  const elapsed = Date.parse(to) - Date.parse(from);
  return Number.isFinite(elapsed) && elapsed > 0 ? elapsed : 0;
}

/**
 * OpenHands SDK events (each with a `kind`, the event class's name) as a trajectory:
 * `ActionEvent` a step (its tool call, the thought as what the model said; a `FinishAction`'s
 * message is the final message), `ObservationEvent` / `AgentErrorEvent` /
 * `UserRejectObservation` that step's observation or error (matched by `tool_call_id`),
 * `MessageEvent` from the agent a step of text, `ConversationErrorEvent` the run's error.
 */
export function parseOpenHandsEvents(events: Json[]): ParsedRun {
  const steps: TrajectoryStep[] = [];
  const byToolCall = new Map<string, { step: TrajectoryStep; at: unknown }>();
  let finalMessage: string | null = null;
  let lastAgentText: string | null = null;
  let error: string | null = null;
  for (const event of events) {
    const kind = event.kind;
    if (kind === 'ActionEvent') {
      const action = (event.action ?? null) as Json | null;
      const toolCall = (event.tool_call ?? {}) as Json;
      let argumentsObject: Json = {};
      if (action !== null) {
        const { kind: _actionKind, ...fields } = action;
        argumentsObject = fields;
      } else if (typeof toolCall.arguments === 'string') {
        // A call the SDK could not turn into an action (bad arguments, no such tool).
        try {
          argumentsObject = JSON.parse(toolCall.arguments) as Json;
        } catch {
          argumentsObject = { _raw_arguments: toolCall.arguments };
        }
      }
      const thought = sdkText(event.thought);
      const step: TrajectoryStep = {
        index: steps.length,
        startedAt: typeof event.timestamp === 'string' ? event.timestamp : '',
        durationMs: 0,
        ...(thought === '' ? {} : { assistant: thought }),
        action: { tool: String(event.tool_name ?? toolCall.name ?? 'tool'), arguments: argumentsObject },
      };
      steps.push(step);
      if (typeof event.tool_call_id === 'string')
        byToolCall.set(event.tool_call_id, { step, at: event.timestamp });
      if (action?.kind === 'FinishAction' && typeof action.message === 'string')
        finalMessage = action.message;
    } else if (kind === 'ObservationEvent') {
      const called = byToolCall.get(String(event.tool_call_id));
      if (called === undefined) continue;
      const { step } = called;
      const observation = (event.observation ?? {}) as Json;
      step.observation = sdkText(observation.content);
      step.durationMs = elapsedMs(called.at, event.timestamp);
      const exitCode = observation.exit_code ?? (observation.metadata as Json | undefined)?.exit_code;
      if (typeof exitCode === 'number') step.exitCode = exitCode;
      if (observation.is_error === true) step.error = step.observation;
    } else if (kind === 'AgentErrorEvent' || kind === 'UserRejectObservation') {
      const message = String(event.error ?? event.rejection_reason ?? kind);
      const called = byToolCall.get(String(event.tool_call_id));
      if (called !== undefined) {
        called.step.error = message;
        called.step.durationMs = elapsedMs(called.at, event.timestamp);
      } else steps.push({ index: steps.length, startedAt: '', durationMs: 0, error: message });
    } else if (kind === 'MessageEvent' && event.source === 'agent') {
      const text = sdkText((event.llm_message as Json | undefined)?.content);
      if (text !== '') {
        lastAgentText = text;
        steps.push({
          index: steps.length,
          startedAt: typeof event.timestamp === 'string' ? event.timestamp : '',
          durationMs: 0,
          assistant: text,
        });
      }
    } else if (kind === 'ConversationErrorEvent') {
      error = `OpenHands stopped with ${String(event.code ?? 'an error')}: ${String(event.detail ?? '')}`;
    }
  }
  return { finalMessage: finalMessage ?? lastAgentText, steps, error, events };
}

/** The runner's trajectory file, `{"status", "error"?, "events": [...]}`; null when it is not that. */
export function readOpenHandsTrajectory(
  text: string,
): { status: string; error: string | null; events: Json[] } | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return null;
  }
  if (typeof parsed !== 'object' || parsed === null) return null;
  const { status, error, events } = parsed as Json;
  if (typeof status !== 'string' || !Array.isArray(events)) return null;
  return {
    status,
    error: typeof error === 'string' && error !== '' ? error : null,
    events: events.filter((event): event is Json => typeof event === 'object' && event !== null),
  };
}

/**
 * A run of our runner: the events it printed (all of them, even when the run was killed before it
 * wrote its file), else those of its trajectory file; the status the file gives says whether the
 * agent finished (the SDK's stuck detector, for one, stops a run without an event saying so), and
 * why not when the agent could not even start (an image without bash for its terminal).
 */
export function parseOpenHandsRun(stdout: string, trajectory: string): ParsedRun {
  const printed = parseJsonLines(stdout).filter((event) => typeof event.kind === 'string');
  const file = readOpenHandsTrajectory(trajectory);
  const parsed = parseOpenHandsEvents(printed.length > 0 ? printed : (file?.events ?? []));
  if (parsed.error === null && file !== null && file.status !== 'finished')
    parsed.error = `OpenHands ended "${file.status}"${file.error === null ? ' without finishing' : `: ${file.error}`}`;
  return parsed;
}

const RUNTIME = '/opt/gym-agents/openhands';
const trajectoryPath = (settings: AgentRunSettings) => `${settings.homeDir}/trajectory.json`;
const taskPath = (settings: AgentRunSettings) => `${settings.homeDir}/task.md`;

export const OPENHANDS_SOURCE: PythonHostSource = {
  kind: 'python-host',
  name: 'openhands',
  version: OPENHANDS_VERSION,
  lockFile: 'openhands.lock',
  files: [{ from: 'openhands_headless.py', to: 'share/gym/openhands_headless.py' }],
  launchers: { 'openhands-gym': ['share/gym/openhands_headless.py'] },
};

/** `openhands-gym --task-file FILE --trajectory FILE --workdir DIR`, the model from the environment. */
export const OPENHANDS_RECIPE: InstalledAgentRecipe = {
  name: 'openhands',
  source: OPENHANDS_SOURCE,
  sandboxBinaryPath: `${RUNTIME}/bin/openhands-gym`,
  configure: (settings) => ({
    // The task goes in a file: a problem statement may be past what one argument can hold (128 KiB).
    files: [{ path: taskPath(settings), content: settings.instruction }],
    env: {
      // LiteLLM's OpenAI-compatible route: the gateway speaks Chat Completions (and Responses).
      LLM_MODEL: `openai/${settings.model}`,
      LLM_BASE_URL: settings.baseUrl,
      LLM_API_KEY: settings.apiKey,
      // No network: LiteLLM reads the price list it ships instead of fetching one (and retrying).
      LITELLM_LOCAL_MODEL_COST_MAP: 'True',
      OPENHANDS_SUPPRESS_BANNER: '1',
    },
  }),
  command: (settings) => [
    OPENHANDS_RECIPE.sandboxBinaryPath,
    '--task-file',
    taskPath(settings),
    '--trajectory',
    trajectoryPath(settings),
    '--workdir',
    settings.workdir,
  ],
  resultFiles: (settings) => [trajectoryPath(settings)],
  parse: (stdout, files) => parseOpenHandsRun(stdout, Object.values(files)[0] ?? ''),
};

export const createOpenHandsHarness = (options: unknown = {}) =>
  createInstalledAgentHarness(OPENHANDS_RECIPE, options as InstalledAgentOptions);
