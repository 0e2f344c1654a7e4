/**
 * Agents distributed on PyPI: mini-swe-agent and OpenHands. Our machines cannot reach PyPI, so
 * these adapters are built from the tools' documented CLIs and event formats and tested for the
 * command lines, install commands and parsing; they are not exercised end to end here (see
 * docs/harnesses.md). They install inside the sandbox into a virtual environment under /opt/gym-agents, so
 * the sandbox needs a route to the package index (network `bridge`), or an image that has the
 * agent (harness option `binaryPath`).
 */
import type { TrajectoryStep } from '../harness.ts';
import {
  createInstalledAgentHarness,
  type InstalledAgentOptions,
  type InstalledAgentRecipe,
  type ParsedRun,
} from './installed-agent.ts';

/**
 * Installs a PyPI package into its own virtual environment at `dir`: never into the system
 * Python, which Debian 12+ and Ubuntu 23.04+ refuse (PEP 668, "externally-managed-environment")
 * and which is the task's own Python (an agent's dependencies must not change what the tests
 * see, so no `--break-system-packages`). Without `ensurepip` (Debian's python3-venv not
 * installed), the venv is made without pip and the system pip installs into it (`--python`,
 * pip 22.3 or later).
 */
export function venvInstallCommand(dir: string, requirement: string): string {
  const quoted = `'${requirement.replaceAll("'", "'\\''")}'`;
  return [
    `if python3 -m venv '${dir}' >/dev/null 2>&1; then '${dir}/bin/python' -m pip install --quiet ${quoted};`,
    `elif python3 -m venv --without-pip '${dir}' && python3 -m pip --version >/dev/null 2>&1; then python3 -m pip --python '${dir}/bin/python' install --quiet ${quoted};`,
    `else echo 'no way to make a virtual environment with pip: install python3-venv (or python3-pip) in the image, or use an image with the agent and the harness option binaryPath' >&2; exit 1; fi`,
  ].join(' ');
}

type Json = Record<string, unknown>;

/**
 * The JSON objects an OpenHands CLI printed: one per line (its current `--json` output, the SDK
 * event's `model_dump()` on one line), or, as earlier releases printed them, a `--JSON Event--`
 * line followed by the event as indented JSON. Anything else (banners, logs) is skipped.
 */
export function parseOpenHandsOutput(stdout: string): Json[] {
  const events: Json[] = [];
  const lines = stdout.split('\n');
  const push = (text: string) => {
    try {
      const parsed = JSON.parse(text) as unknown;
      if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed))
        events.push(parsed as Json);
    } catch {
      // Not an event.
    }
  };
  for (let index = 0; index < lines.length; index += 1) {
    const line = lines[index]!;
    if (line.trim() === '--JSON Event--') {
      const block: string[] = [];
      while (index + 1 < lines.length && lines[index + 1]!.trim() !== '--JSON Event--') {
        index += 1;
        block.push(lines[index]!);
        // The indented object ends with a closing brace at column 0.
        if (lines[index] === '}') break;
      }
      push(block.join('\n'));
    } else if (line.startsWith('{')) push(line);
  }
  return events;
}

/** The text of SDK content: a string, or the text parts of a list of TextContent/ImageContent. */
function sdkText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return (content as Json[]).map((part) => (typeof part.text === 'string' ? part.text : '')).join('');
}

/**
 * OpenHands SDK events (each with a `kind`, the event class's name) as a trajectory:
 * `ActionEvent` a step (its tool call, the thought as what the model said; a `FinishAction`'s
 * message is the final message), `ObservationEvent` / `AgentErrorEvent` /
 * `UserRejectObservation` that step's observation or error (matched by `tool_call_id`),
 * `MessageEvent` from the agent a step of text, `ConversationErrorEvent` the run's error.
 */
export function parseOpenHandsEvents(stdout: string): ParsedRun {
  const events = parseOpenHandsOutput(stdout);
  const steps: TrajectoryStep[] = [];
  const byToolCall = new Map<string, TrajectoryStep>();
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
      if (typeof event.tool_call_id === 'string') byToolCall.set(event.tool_call_id, step);
      if (action?.kind === 'FinishAction' && typeof action.message === 'string')
        finalMessage = action.message;
    } else if (kind === 'ObservationEvent') {
      const step = byToolCall.get(String(event.tool_call_id));
      const observation = (event.observation ?? {}) as Json;
      if (step === undefined) continue;
      step.observation = sdkText(observation.content);
      const exitCode = observation.exit_code ?? (observation.metadata as Json | undefined)?.exit_code;
      if (typeof exitCode === 'number') step.exitCode = exitCode;
      if (observation.is_error === true) step.error = step.observation;
    } else if (kind === 'AgentErrorEvent' || kind === 'UserRejectObservation') {
      const message = String(event.error ?? event.rejection_reason ?? kind);
      const step = byToolCall.get(String(event.tool_call_id));
      if (step !== undefined) step.error = message;
      else steps.push({ index: steps.length, startedAt: '', durationMs: 0, error: message });
    } else if (kind === 'MessageEvent' && event.source === 'agent') {
      const text = sdkText((event.llm_message as Json | undefined)?.content);
      if (text !== '') {
        lastAgentText = text;
        steps.push({ index: steps.length, startedAt: '', durationMs: 0, assistant: text });
      }
    } else if (kind === 'ConversationErrorEvent') {
      error = `OpenHands stopped with ${String(event.code ?? 'an error')}: ${String(event.detail ?? '')}`;
    }
  }
  return { finalMessage: finalMessage ?? lastAgentText, steps, error, events };
}

/** OpenHands CLI v1 headless: `openhands --headless --json -t TASK`, the LLM from env with `--override-with-envs`. */
export const OPENHANDS_RECIPE: InstalledAgentRecipe = {
  name: 'openhands',
  source: {
    kind: 'in-sandbox',
    installCommand: venvInstallCommand('/opt/gym-agents/openhands', 'openhands'),
  },
  sandboxBinaryPath: '/opt/gym-agents/openhands/bin/openhands',
  configure: (settings) => ({
    files: [],
    env: {
      LLM_MODEL: `openai/${settings.model}`,
      LLM_BASE_URL: settings.baseUrl,
      LLM_API_KEY: settings.apiKey,
    },
  }),
  command: (settings) => [
    OPENHANDS_RECIPE.sandboxBinaryPath,
    '--headless',
    '--json',
    '--override-with-envs',
    '-t',
    settings.instruction,
  ],
  parse: (stdout) => parseOpenHandsEvents(stdout),
};

export const createOpenHandsHarness = (options: unknown = {}) =>
  createInstalledAgentHarness(OPENHANDS_RECIPE, options as InstalledAgentOptions);
