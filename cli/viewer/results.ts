/**
 * What the viewer shows of a results file: a summary per rollout for the run page and its table,
 * and one rollout in full, step by step. Lines are ours (`_gym`), NeMo Gym's own (no `_gym`) or
 * from earlier versions (our fields at the top level); `gymFields` reads all three. Pure: the
 * server passes the lines it read. Every string here came from an agent, a model or a verifier:
 * the page renders it as text, never as markup.
 */

import { gymFields, storedOutputText } from '../../environments/runner/rollout-line.ts';
import { usageOfRecord } from '../../environments/runner/usage.ts';

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const finiteOrNull = (value: unknown): number | null =>
  typeof value === 'number' && Number.isFinite(value) ? value : null;
const stringOrNull = (value: unknown): string | null => (typeof value === 'string' ? value : null);

/** One rollout in the run's table. */
export interface RolloutSummary {
  /** The line's position in the file (from 0): how the page asks for the rollout. */
  position: number;
  taskIndex: number;
  rolloutIndex: number;
  /** The row's own id (`instance_id`, `id`, `task_id`, `uuid`), else `task N`. */
  task: string;
  /** `reward`, `agent_error`, ...; a NeMo Gym line has none of ours: `reward` when it has one. */
  outcome: string;
  reward: number | null;
  inputTokens: number | null;
  outputTokens: number | null;
  costUsd: number | null;
  totalMs: number | null;
  steps: number;
  modelCalls: number;
}

/** A failure of `FILE_failures.jsonl`: a rollout that has no reward. */
export interface FailureSummary {
  taskIndex: number | null;
  rolloutIndex: number | null;
  task: string;
  failureClass: string;
  message: string;
}

function taskName(line: Json, taskIndex: number): string {
  for (const key of ['instance_id', 'id', 'task_id', 'uuid', 'name']) {
    const value = line[key];
    if (typeof value === 'string' && value !== '') return value;
    if (typeof value === 'number') return String(value);
  }
  return `task ${taskIndex}`;
}

/** The tokens of a line: the gateway's sum in `_gym.usage`, else the Responses object's own usage. */
function tokens(line: Json): { input: number | null; output: number | null; cost: number | null } {
  const usage = gymFields(line).usage;
  if (isObject(usage))
    return {
      input: finiteOrNull(usage.input_tokens),
      output: finiteOrNull(usage.output_tokens),
      cost: finiteOrNull(usage.cost_usd),
    };
  const responseUsage = isObject(line.response) ? line.response.usage : undefined;
  if (isObject(responseUsage))
    return {
      input: finiteOrNull(responseUsage.input_tokens),
      output: finiteOrNull(responseUsage.output_tokens),
      cost: null,
    };
  return { input: null, output: null, cost: null };
}

export function summarizeRollout(line: Json, position: number): RolloutSummary {
  const gym = gymFields(line);
  const taskIndex = finiteOrNull(line._ng_task_index) ?? position;
  const reward = finiteOrNull(line.reward) ?? (typeof line.reward === 'boolean' ? Number(line.reward) : null);
  const usage = tokens(line);
  return {
    position,
    taskIndex,
    rolloutIndex: finiteOrNull(line._ng_rollout_index) ?? 0,
    task: taskName(line, taskIndex),
    outcome: typeof gym.outcome === 'string' ? gym.outcome : reward === null ? 'unknown' : 'reward',
    reward,
    inputTokens: usage.input,
    outputTokens: usage.output,
    costUsd: usage.cost,
    totalMs: isObject(gym.timings) ? finiteOrNull(gym.timings.totalMs) : null,
    steps: Array.isArray(gym.trajectory) ? gym.trajectory.length : 0,
    modelCalls: Array.isArray(gym.model_calls) ? gym.model_calls.length : 0,
  };
}

export function summarizeFailure(line: Json): FailureSummary {
  const taskIndex = finiteOrNull(line._ng_task_index);
  const error = isObject(line.error) ? line.error : undefined;
  return {
    taskIndex,
    rolloutIndex: finiteOrNull(line._ng_rollout_index),
    task: taskName(line, taskIndex ?? -1),
    failureClass: stringOrNull(line._ng_failure_class) ?? stringOrNull(line.outcome) ?? 'failure',
    message:
      stringOrNull(line.message) ??
      stringOrNull(error?.message) ??
      stringOrNull(line.error) ??
      stringOrNull(line.reason) ??
      '',
  };
}

/** A message of the prompt, its content flattened to text. */
export interface PromptMessage {
  role: string;
  text: string;
}

function contentText(content: unknown): string {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return content === undefined ? '' : JSON.stringify(content);
  return content
    .map((part) =>
      isObject(part) && typeof part.text === 'string'
        ? part.text
        : typeof part === 'string'
          ? part
          : JSON.stringify(part),
    )
    .join('');
}

/** The prompt a line's `responses_create_params` held: its instructions, then its input messages. */
function promptOf(line: Json): PromptMessage[] {
  const params = isObject(line.responses_create_params) ? line.responses_create_params : {};
  const messages: PromptMessage[] = [];
  if (typeof params.instructions === 'string' && params.instructions !== '')
    messages.push({ role: 'system', text: params.instructions });
  if (typeof params.input === 'string') messages.push({ role: 'user', text: params.input });
  else if (Array.isArray(params.input))
    for (const item of params.input)
      if (isObject(item))
        messages.push({
          role: stringOrNull(item.role) ?? stringOrNull(item.type) ?? 'item',
          text: contentText(item.content ?? item.output ?? item.arguments),
        });
  return messages;
}

export interface StepView {
  index: number;
  startedAt: string | null;
  durationMs: number | null;
  assistant: string | null;
  /** The tool and its arguments; for a shell command, the command itself. */
  action: { tool: string; command: string } | null;
  observation: string | null;
  exitCode: number | null;
  error: string | null;
  inputTokens: number | null;
  outputTokens: number | null;
}

export interface ModelCallView {
  index: number;
  api: string;
  startedAt: string | null;
  durationMs: number | null;
  model: string | null;
  status: string;
  inputTokens: number | null;
  outputTokens: number | null;
  cachedTokens: number | null;
  error: string | null;
}

/** One rollout, everything the page shows of it. */
export interface RolloutView {
  summary: RolloutSummary;
  prompt: PromptMessage[];
  output: string | null;
  harness: { outcome: string | null; submission: string | null; message: string | null } | null;
  steps: StepView[];
  modelCalls: ModelCallView[];
  /** The verifier's details (ours), and the verifier fields NeMo Gym puts at the top level. */
  verifier: Json;
  timings: Record<string, number>;
  /** When the rollout started (ms since the epoch), for the timeline; null when no record says. */
  startedAtMs: number | null;
}

function commandOf(argumentsValue: unknown): string {
  if (!isObject(argumentsValue)) return JSON.stringify(argumentsValue ?? null);
  if (typeof argumentsValue.command === 'string') return argumentsValue.command;
  if (Array.isArray(argumentsValue.command)) return argumentsValue.command.map(String).join(' ');
  return JSON.stringify(argumentsValue, null, 2);
}

function stepView(step: unknown, position: number): StepView {
  const value = isObject(step) ? step : {};
  const action = isObject(value.action) ? value.action : undefined;
  const usage = isObject(value.usage) ? value.usage : undefined;
  return {
    index: finiteOrNull(value.index) ?? position,
    startedAt: stringOrNull(value.startedAt),
    durationMs: finiteOrNull(value.durationMs),
    assistant: stringOrNull(value.assistant),
    action:
      action === undefined
        ? null
        : { tool: stringOrNull(action.tool) ?? 'tool', command: commandOf(action.arguments) },
    observation: stringOrNull(value.observation),
    exitCode: finiteOrNull(value.exitCode),
    error: stringOrNull(value.error),
    inputTokens: finiteOrNull(usage?.inputTokens),
    outputTokens: finiteOrNull(usage?.outputTokens),
  };
}

function modelCallView(record: unknown, position: number): ModelCallView {
  const value = isObject(record) ? record : {};
  const usage = usageOfRecord(value);
  const response = isObject(value.upstreamResponse)
    ? value.upstreamResponse
    : isObject(value.response)
      ? value.response
      : {};
  const error = isObject(value.error) ? value.error : undefined;
  return {
    index: finiteOrNull(value.index) ?? position,
    api: stringOrNull(value.api) ?? 'unknown',
    startedAt: stringOrNull(value.startedAt),
    durationMs: finiteOrNull(value.durationMs),
    model: stringOrNull(response.model) ?? stringOrNull(value.upstreamModel),
    status: stringOrNull(value.status) ?? 'unknown',
    inputTokens: usage?.input_tokens ?? null,
    outputTokens: usage?.output_tokens ?? null,
    cachedTokens: usage?.cached_tokens ?? null,
    error:
      error === undefined
        ? null
        : `${stringOrNull(error.code) ?? 'error'}: ${stringOrNull(error.message) ?? ''}`,
  };
}

/** The verifier fields NeMo Gym's resources servers put at the top level of a line (mcqa's, swebench's). */
const NEMO_GYM_VERIFIER_FIELDS = [
  'expected_answer',
  'extracted_answer',
  'resolved',
  'evaluation_completed',
  'model_patch',
  'patch_verification_time_taken',
];

export function viewRollout(line: Json, position: number): RolloutView {
  const gym = gymFields(line);
  const steps = Array.isArray(gym.trajectory) ? gym.trajectory.map(stepView) : [];
  const modelCalls = Array.isArray(gym.model_calls) ? gym.model_calls.map(modelCallView) : [];
  const verifier: Json = { ...(isObject(gym.verifier) ? gym.verifier : {}) };
  for (const key of NEMO_GYM_VERIFIER_FIELDS) if (line[key] !== undefined) verifier[key] = line[key];
  const timings: Record<string, number> = {};
  if (isObject(gym.timings))
    for (const [key, value] of Object.entries(gym.timings)) {
      const number = finiteOrNull(value);
      if (number !== null) timings[key] = number;
    }
  const starts = [...steps.map((step) => step.startedAt), ...modelCalls.map((call) => call.startedAt)]
    .map((text) => (text === null ? Number.NaN : Date.parse(text)))
    .filter(Number.isFinite);
  const harness = gym.harness ?? null;
  return {
    summary: summarizeRollout(line, position),
    prompt: promptOf(line),
    output: storedOutputText(line),
    harness: isObject(harness)
      ? {
          outcome: stringOrNull(harness.outcome),
          submission: stringOrNull(harness.submission),
          message: stringOrNull(harness.message),
        }
      : null,
    steps,
    modelCalls,
    verifier,
    timings,
    startedAtMs: starts.length === 0 ? null : Math.min(...starts),
  };
}
