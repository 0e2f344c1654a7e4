/**
 * A rollout line's trajectory in the two standard shapes: NeMo Gym's `ng_trajectory` and Harbor's
 * ATIF (trajectory-schemas.ts has both schemas). Pure: a line in, a record out.
 *
 * Our lines carry the trajectory under `_gym` (rollout-line.ts): the harness's steps (what the
 * model said, the command or tool call it made, what came back, its exit code and timing), the
 * gateway's record of every model call (request, response, usage, and, when the upstream returned
 * them, the exact prompt and completion token ids with logprobs under `tokens`), the summed usage
 * and cost, the verifier's details and the timings. NeMo Gym's own lines carry `ng_trajectory`
 * when its collection projected one (taken as it is), else at least `response.output`, the
 * Responses items of the agent's last answer (made into a conversation).
 *
 * The join of steps and model calls: when a harness reported as many steps as the gateway recorded
 * model calls, step i is call i (a harness makes one call per step); otherwise the steps stand
 * alone and the calls are listed beside them, joined to no step, and a gap says so. Token ids are
 * carried where each schema holds them: on the training variant of the assistant item of the call
 * (ng_trajectory) and in the step's metrics (ATIF).
 */
import { GymError } from '../../core/errors.ts';
import { VERSION } from '../../core/version.ts';
import { GYM_FIELDS, gymFields } from './rollout-line.ts';
import {
  ATIF_SCHEMA_VERSION,
  type AtifStep,
  type AtifTrajectory,
  atifTrajectorySchema,
  type NgConversationItem,
  type NgTrajectory,
  ngTrajectorySchema,
} from './trajectory-schemas.ts';
import { type RolloutUsage, usageOfRecord } from './usage.ts';

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);
const stringOr = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);
const seconds = (iso: unknown): number | undefined => {
  const ms = typeof iso === 'string' ? Date.parse(iso) : Number.NaN;
  return Number.isFinite(ms) ? ms / 1000 : undefined;
};

/** The trajectory formats `gym eval export` and `gym eval run --trajectories` write. */
export type TrajectoryFormat = 'ng' | 'atif';

/** One model call as both exports read it from a gateway record. */
interface ModelCall {
  id: string;
  startedAt: number | undefined;
  durationMs: number | undefined;
  request: unknown;
  response: unknown;
  model: string | undefined;
  dialect: string | undefined;
  ok: boolean;
  finishReason: string | undefined;
  errorCode: string | undefined;
  upstreamStatus: number | undefined;
  usage: { input_tokens: number; output_tokens: number; cached_tokens: number } | null;
  reasoningTokens: number | undefined;
  /** The exact tokens, when the gateway recorded them. */
  tokens:
    | { promptTokenIds: number[]; completionTokenIds: number[]; completionLogprobs?: number[] }
    | undefined;
  tokenDrift: unknown;
  /** The assistant's text in the response (Chat Completions, Responses or Messages). */
  text: string;
  /** The tool calls in the response, as the agent got it (its own API). */
  toolCalls: Array<{ callId: string; name: string; arguments: string }>;
  /** The tool outputs the request fed back, by call id (what the agent's tools returned). */
  toolOutputs: Map<string, string>;
}

const contentText = (content: unknown): string =>
  typeof content === 'string'
    ? content
    : Array.isArray(content)
      ? content
          .flatMap((part) => (isObject(part) && typeof part.text === 'string' ? [part.text] : []))
          .join('')
      : JSON.stringify(content ?? null);

/** The tool calls of a response in any of the three APIs. */
function toolCallsOf(response: unknown): ModelCall['toolCalls'] {
  if (!isObject(response)) return [];
  const calls: ModelCall['toolCalls'] = [];
  if (Array.isArray(response.choices)) {
    const message = (response.choices[0] as Json | undefined)?.message;
    for (const call of isObject(message) && Array.isArray(message.tool_calls) ? message.tool_calls : [])
      if (isObject(call) && isObject(call.function) && typeof call.id === 'string')
        calls.push({
          callId: call.id,
          name: String(call.function.name),
          arguments: typeof call.function.arguments === 'string' ? call.function.arguments : '{}',
        });
  } else if (Array.isArray(response.output)) {
    for (const item of response.output)
      if (isObject(item) && item.type === 'function_call' && typeof item.call_id === 'string')
        calls.push({
          callId: item.call_id,
          name: String(item.name),
          arguments: String(item.arguments ?? '{}'),
        });
  } else if (Array.isArray(response.content)) {
    for (const block of response.content)
      if (isObject(block) && block.type === 'tool_use' && typeof block.id === 'string')
        calls.push({
          callId: block.id,
          name: String(block.name),
          arguments: JSON.stringify(block.input ?? {}),
        });
  }
  return calls;
}

/** The tool outputs a request carries back (Chat `tool` messages, Responses outputs, Messages results). */
function toolOutputsOf(request: unknown): Map<string, string> {
  const outputs = new Map<string, string>();
  if (!isObject(request)) return outputs;
  for (const message of Array.isArray(request.messages) ? request.messages : []) {
    if (!isObject(message)) continue;
    if (message.role === 'tool' && typeof message.tool_call_id === 'string')
      outputs.set(message.tool_call_id, contentText(message.content));
    if (Array.isArray(message.content))
      for (const block of message.content)
        if (isObject(block) && block.type === 'tool_result' && typeof block.tool_use_id === 'string')
          outputs.set(block.tool_use_id, contentText(block.content));
  }
  for (const item of Array.isArray(request.input) ? request.input : [])
    if (isObject(item) && item.type === 'function_call_output' && typeof item.call_id === 'string')
      outputs.set(item.call_id, contentText(item.output));
  return outputs;
}

/** A count both schemas can hold (a whole number), else null: an upstream's odd usage is no count. */
const tokenCount = (value: number): number | null => (Number.isInteger(value) && value >= 0 ? value : null);

const isIntegers = (value: unknown): value is number[] =>
  Array.isArray(value) && value.every((entry) => Number.isInteger(entry));
const isNumbers = (value: unknown): value is number[] =>
  Array.isArray(value) && value.every((entry) => typeof entry === 'number');

function responseText(response: unknown): string {
  if (!isObject(response)) return '';
  if (Array.isArray(response.choices)) {
    const message = (response.choices[0] as Json | undefined)?.message;
    return isObject(message) && typeof message.content === 'string' ? message.content : '';
  }
  if (Array.isArray(response.output)) {
    const texts: string[] = [];
    for (const item of response.output)
      if (isObject(item) && item.type === 'message' && Array.isArray(item.content))
        for (const part of item.content)
          if (isObject(part) && part.type === 'output_text' && typeof part.text === 'string')
            texts.push(part.text);
    return texts.join('');
  }
  if (Array.isArray(response.content))
    return response.content
      .flatMap((part) =>
        isObject(part) && part.type === 'text' && typeof part.text === 'string' ? [part.text] : [],
      )
      .join('');
  return '';
}

function finishReasonOf(response: unknown): string | undefined {
  if (!isObject(response)) return undefined;
  if (Array.isArray(response.choices))
    return stringOr((response.choices[0] as Json | undefined)?.finish_reason);
  return stringOr(response.stop_reason) ?? stringOr(response.status);
}

function modelCallOf(record: unknown, rolloutId: string, position: number): ModelCall {
  const fields = isObject(record) ? record : {};
  const response = fields.upstreamResponse ?? fields.response;
  const usage = isObject(fields.usage) ? fields.usage : {};
  const reasoning =
    (isObject(usage.completion_tokens_details)
      ? usage.completion_tokens_details.reasoning_tokens
      : undefined) ??
    (isObject(usage.output_tokens_details) ? usage.output_tokens_details.reasoning_tokens : undefined);
  const tokens = isObject(fields.tokens) ? fields.tokens : undefined;
  const error = isObject(fields.error) ? fields.error : undefined;
  const index = typeof fields.index === 'number' ? fields.index : position;
  const startedAt = seconds(fields.startedAt);
  return {
    id: `${rolloutId}/call-${index}`,
    startedAt,
    durationMs: typeof fields.durationMs === 'number' ? fields.durationMs : undefined,
    request: fields.request ?? null,
    response: fields.response ?? null,
    model: (isObject(response) ? stringOr(response.model) : undefined) ?? stringOr(fields.upstreamModel),
    dialect: stringOr(fields.upstreamApi) ?? stringOr(fields.api),
    ok: fields.status === 'ok',
    finishReason: finishReasonOf(response),
    errorCode: stringOr(error?.code),
    upstreamStatus: typeof error?.upstreamStatus === 'number' ? error.upstreamStatus : undefined,
    usage: usageOfRecord(record),
    reasoningTokens:
      Number.isInteger(reasoning) && (reasoning as number) >= 0 ? (reasoning as number) : undefined,
    tokens:
      tokens !== undefined && isIntegers(tokens.promptTokenIds) && isIntegers(tokens.completionTokenIds)
        ? {
            promptTokenIds: tokens.promptTokenIds,
            completionTokenIds: tokens.completionTokenIds,
            ...(isNumbers(tokens.completionLogprobs)
              ? { completionLogprobs: tokens.completionLogprobs }
              : {}),
          }
        : undefined,
    tokenDrift: fields.tokenDrift,
    text: responseText(response),
    toolCalls: toolCallsOf(fields.response),
    toolOutputs: toolOutputsOf(fields.request),
  };
}

/** A harness step as stored (harnesses/harness.ts `TrajectoryStep`). */
interface Step {
  index: number;
  startedAt: number | undefined;
  durationMs: number | undefined;
  assistant: string | undefined;
  action: { tool: string; arguments: Json } | undefined;
  observation: string | undefined;
  exitCode: number | null | undefined;
  error: string | undefined;
  /** The tokens the harness counted for the step (when no model call is joined to it). */
  usage: { inputTokens: number; outputTokens: number } | undefined;
}

function stepOf(raw: unknown, position: number): Step {
  const fields = isObject(raw) ? raw : {};
  const action =
    isObject(fields.action) && typeof fields.action.tool === 'string' ? fields.action : undefined;
  return {
    index: typeof fields.index === 'number' ? fields.index : position,
    startedAt: seconds(fields.startedAt),
    durationMs: typeof fields.durationMs === 'number' ? fields.durationMs : undefined,
    assistant: stringOr(fields.assistant),
    action:
      action === undefined
        ? undefined
        : { tool: action.tool as string, arguments: isObject(action.arguments) ? action.arguments : {} },
    observation: stringOr(fields.observation),
    exitCode: typeof fields.exitCode === 'number' || fields.exitCode === null ? fields.exitCode : undefined,
    error: stringOr(fields.error),
    usage:
      isObject(fields.usage) &&
      Number.isInteger(fields.usage.inputTokens) &&
      Number.isInteger(fields.usage.outputTokens)
        ? {
            inputTokens: fields.usage.inputTokens as number,
            outputTokens: fields.usage.outputTokens as number,
          }
        : undefined,
  };
}

/** The task and rollout a line is, as NeMo Gym names them: the row's id, else its indices. */
function identity(line: Json): { taskId: string; rolloutId: string } {
  const idKey = ['task_id', 'problem_id', 'instance_id'].find((key) => line[key] != null);
  const taskId = idKey === undefined ? String(line._ng_task_index ?? 0) : String(line[idKey]);
  const rolloutId =
    stringOr(line._ng_rollout_id) ??
    `${String(line._ng_task_index ?? 0)}-${String(line._ng_rollout_index ?? 0)}`;
  return { taskId, rolloutId };
}

/** The prompt items of the row the rollout ran (its Responses create parameters). */
function promptItems(line: Json): NgConversationItem[] {
  const params = isObject(line.responses_create_params) ? line.responses_create_params : {};
  const items: NgConversationItem[] = [];
  if (typeof params.instructions === 'string')
    items.push({ type: 'message', role: 'system', content: params.instructions });
  if (typeof params.input === 'string') items.push({ type: 'message', role: 'user', content: params.input });
  else if (Array.isArray(params.input))
    for (const item of params.input) {
      if (!isObject(item)) continue;
      const role = item.role;
      if (
        (item.type === undefined || item.type === 'message') &&
        (role === 'user' || role === 'system' || role === 'developer' || role === 'assistant') &&
        (typeof item.content === 'string' || Array.isArray(item.content))
      )
        items.push({ type: 'message', role, content: item.content as string });
    }
  return items;
}

const harnessStatus = (outcome: unknown): 'completed' | 'failed' | 'incomplete' | 'unknown' =>
  outcome === 'submitted'
    ? 'completed'
    : outcome === 'agent_error' || outcome === 'infra_error' || outcome === 'sandbox_gone'
      ? 'failed'
      : outcome === 'step_limit' || outcome === 'time_limit' || outcome === 'cost_limit'
        ? 'incomplete'
        : 'unknown';

/** The token fields of a training item, when the call has all three (NeMo Gym's rule). */
function trainingFields(call: ModelCall | undefined): Json {
  if (call?.tokens?.completionLogprobs === undefined) return {};
  return {
    prompt_token_ids: call.tokens.promptTokenIds,
    generation_token_ids: call.tokens.completionTokenIds,
    generation_log_probs: call.tokens.completionLogprobs,
  };
}

/** What both exports build from one of our lines. */
interface Parsed {
  taskId: string;
  rolloutId: string;
  steps: Step[];
  calls: ModelCall[];
  /** The call of each step, when steps and calls are one to one. */
  callOfStep: (position: number) => ModelCall | undefined;
  joined: boolean;
}

function parseOurs(line: Json): Parsed {
  const { taskId, rolloutId } = identity(line);
  const gym = gymFields(line);
  const steps = (Array.isArray(gym.trajectory) ? gym.trajectory : []).map(stepOf);
  const calls = (Array.isArray(gym.model_calls) ? gym.model_calls : [])
    .map((record, position) => ({ record, call: modelCallOf(record, rolloutId, position) }))
    // A token count asked of the upstream is no model call of the agent's.
    .filter(({ record }) => !(isObject(record) && record.api === 'messages.count_tokens'))
    .map(({ call }) => call);
  const joined = steps.length > 0 && steps.length === calls.length;
  return {
    taskId,
    rolloutId,
    steps,
    calls,
    joined,
    callOfStep: (position) => (joined ? calls[position] : undefined),
  };
}

const outputMessage = (id: string, text: string, call: ModelCall | undefined): NgConversationItem => ({
  type: 'message',
  id,
  role: 'assistant',
  status: 'completed',
  content: [{ type: 'output_text', text, annotations: [] }],
  ...trainingFields(call),
});

/** An ng_trajectory record of one of our lines. */
/** Where each agent turn's items start in the conversation, and the model call it was. */
interface TurnGroup {
  start: number;
  callId: string | undefined;
  timestamp: number | undefined;
  /** The harness's count of the step's tokens, for a step no model call is joined to. */
  stepUsage?: { inputTokens: number; outputTokens: number };
  /** The gateway's flag on the call: its prompt did not extend the ids the policy produced. */
  tokenDrift?: unknown;
}

function ngOfOurs(line: Json): { record: NgTrajectory; groups: TurnGroup[] } {
  const parsed = parseOurs(line);
  const { taskId, rolloutId, steps, calls } = parsed;
  const gym = gymFields(line);
  const invocationId = `${rolloutId}/agent`;
  const conversation: NgConversationItem[] = promptItems(line);
  const gaps: NgTrajectory['gaps'] = [];
  const callRef = (call: ModelCall) => ({ model_call_id: call.id });
  /** The tool calls an agent CLI made, read from the gateway's records (no step reported them). */
  const agentToolCalls: NonNullable<NgTrajectory['tool_calls']> = [];
  const groups: TurnGroup[] = [];
  if (steps.length > 0) {
    steps.forEach((step, position) => {
      const call = parsed.callOfStep(position);
      groups.push({
        start: conversation.length,
        callId: call?.id,
        timestamp: step.startedAt,
        ...(call === undefined && step.usage !== undefined ? { stepUsage: step.usage } : {}),
        ...(call?.tokenDrift === undefined ? {} : { tokenDrift: call.tokenDrift }),
      });
      const callId = `call_${step.index}`;
      // The item the sampled tokens belong to: the action when there is one, else the text.
      if (step.assistant !== undefined || step.action === undefined)
        conversation.push(
          outputMessage(
            `msg_${step.index}`,
            step.assistant ?? '',
            step.action === undefined ? call : undefined,
          ),
        );
      if (step.action !== undefined)
        conversation.push({
          type: 'function_call',
          call_id: callId,
          name: step.action.tool,
          arguments: JSON.stringify(step.action.arguments),
          status: 'completed',
          ...trainingFields(call),
        });
      if (step.action !== undefined && (step.observation !== undefined || step.error !== undefined))
        conversation.push({
          type: 'function_call_output',
          call_id: callId,
          output: step.observation ?? step.error ?? '',
        });
    });
    if (!parsed.joined && calls.length > 0)
      gaps.push({
        code: 'model_call_step_join_unavailable',
        invocation_id: invocationId,
        detail: `${steps.length} steps, ${calls.length} model calls: calls are not attributed to steps`,
      });
  } else {
    // No steps reported (an agent CLI): the answers the gateway saw are the agent's turns, their
    // tool calls its actions, and what later requests fed back for them their outputs.
    const outputs = new Map<string, string>();
    for (const call of calls)
      for (const [id, output] of call.toolOutputs) if (!outputs.has(id)) outputs.set(id, output);
    for (const call of calls) {
      if (!call.ok) continue;
      groups.push({
        start: conversation.length,
        callId: call.id,
        timestamp: call.startedAt,
        ...(call.tokenDrift === undefined ? {} : { tokenDrift: call.tokenDrift }),
      });
      const last = call.toolCalls.length - 1;
      if (call.text !== '' || last < 0)
        conversation.push(outputMessage(`msg_${call.id}`, call.text, last < 0 ? call : undefined));
      call.toolCalls.forEach((toolCall, position) => {
        conversation.push({
          type: 'function_call',
          call_id: toolCall.callId,
          name: toolCall.name,
          arguments: toolCall.arguments,
          status: 'completed',
          ...(position === last ? trainingFields(call) : {}),
        });
        const output = outputs.get(toolCall.callId);
        if (output !== undefined)
          conversation.push({ type: 'function_call_output', call_id: toolCall.callId, output });
        agentToolCalls.push({
          kind: 'tool_call',
          invocation_id: invocationId,
          tool_call_id: toolCall.callId,
          tool_name: toolCall.name,
          timing_source: null,
          status: output === undefined ? 'unknown' : 'completed',
          output: output ?? null,
        });
      });
    }
  }
  for (const call of calls)
    if (isObject(call.tokenDrift))
      gaps.push({
        code: 'token_ids_retokenized',
        invocation_id: invocationId,
        detail: `${call.id}: ${JSON.stringify(call.tokenDrift)}`,
      });
  for (const call of calls)
    if (call.tokens !== undefined && call.tokens.completionLogprobs === undefined)
      gaps.push({ code: 'generation_log_probs_unavailable', invocation_id: invocationId, detail: call.id });
  const resolved =
    typeof line.resolved === 'boolean'
      ? line.resolved
      : typeof line.reward === 'number'
        ? line.reward > 0
        : null;
  const turns: NonNullable<NgTrajectory['turns']> = (
    steps.length > 0
      ? steps.map((step, position) => ({
          timestamp: step.startedAt,
          answer: step.assistant ?? null,
          call: parsed.callOfStep(position),
        }))
      : calls
          .filter((call) => call.ok)
          .map((call) => ({ timestamp: call.startedAt, answer: call.text, call }))
  ).flatMap((turn, position, all) =>
    turn.timestamp === undefined
      ? []
      : [
          {
            invocation_id: invocationId,
            task_id: taskId,
            rollout_id: rolloutId,
            turn_no: position + 1,
            timestamp: turn.timestamp,
            question:
              position === 0 ? ((promptItems(line).at(-1) as Json | undefined)?.content ?? null) : null,
            answer: turn.answer,
            resolved: position === all.length - 1 ? resolved : null,
            step_count: position + 1,
            model_calls: turn.call === undefined ? [] : [callRef(turn.call)],
          },
        ],
  );
  const timings = isObject(gym.timings) ? gym.timings : {};
  const harness: Json = isObject(gym.harness) ? gym.harness : {};
  const status = harnessStatus(harness.outcome);
  if (typeof gym.model_calls_error === 'string')
    gaps.push({ code: 'model_call_capture_failed', detail: gym.model_calls_error });
  if (calls.length === 0) gaps.push({ code: 'model_calls_unavailable' });
  if (turns.length === 0) gaps.push({ code: 'turns_unavailable' });
  const record: NgTrajectory = {
    schema_version: '1.0',
    task_id: taskId,
    rollout_id: rolloutId,
    invocations: [
      {
        kind: 'agent_invocation',
        invocation_id: invocationId,
        status,
        duration_ms: typeof timings.agentMs === 'number' ? timings.agentMs : null,
        error_type: status === 'failed' ? String(harness.outcome) : null,
        model_calls: calls.map(callRef),
        conversation,
      },
    ],
    turns,
    model_calls: calls.map((call) => ({
      model_call_id: call.id,
      started_at: call.startedAt ?? null,
      completed_at:
        call.startedAt === undefined || call.durationMs === undefined
          ? null
          : call.startedAt + call.durationMs / 1000,
      duration_ms: call.durationMs ?? null,
      request: call.request,
      response: call.response,
      response_metadata: {
        model: call.model ?? null,
        dialect: call.dialect ?? null,
        status_code: call.upstreamStatus ?? null,
        response_status: call.ok ? 'ok' : 'error',
        finish_reason: call.finishReason ?? null,
        error_category: call.errorCode ?? null,
      },
      token_stats:
        call.usage === null
          ? {}
          : {
              prompt_tokens: tokenCount(call.usage.input_tokens),
              completion_tokens: tokenCount(call.usage.output_tokens),
              total_tokens: tokenCount(call.usage.input_tokens + call.usage.output_tokens),
              cached_tokens: tokenCount(call.usage.cached_tokens),
              reasoning_tokens: call.reasoningTokens ?? null,
            },
    })),
    tool_calls: [
      ...agentToolCalls,
      ...steps.flatMap((step) =>
        step.action === undefined
          ? []
          : [
              {
                kind: 'tool_call' as const,
                invocation_id: invocationId,
                tool_call_id: `call_${step.index}`,
                tool_name: step.action.tool,
                started_at: step.startedAt ?? null,
                completed_at:
                  step.startedAt === undefined || step.durationMs === undefined
                    ? null
                    : step.startedAt + step.durationMs / 1000,
                duration_ms: step.durationMs ?? null,
                timing_source: 'harness' as const,
                status: step.error === undefined ? ('completed' as const) : ('failed' as const),
                error_type: step.error ?? null,
                output: step.observation ?? null,
              },
            ],
      ),
    ],
    gaps,
  };
  return { record, groups };
}

/** An ng_trajectory record of one of NeMo Gym's lines: its own, else one made of its response items. */
function ngOfNemoGym(line: Json): NgTrajectory {
  if (isObject(line.ng_trajectory)) return parseWith(ngTrajectorySchema, line.ng_trajectory, 'ng_trajectory');
  const { taskId, rolloutId } = identity(line);
  const response = isObject(line.response) ? line.response : {};
  const output = Array.isArray(response.output) ? response.output : [];
  const conversation = [...promptItems(line), ...output.filter(isObject)] as NgConversationItem[];
  return {
    schema_version: '1.0',
    task_id: taskId,
    rollout_id: rolloutId,
    invocations: [
      {
        kind: 'agent_invocation',
        invocation_id: `${rolloutId}/agent`,
        status:
          response.status === 'completed' ? 'completed' : response.status === 'failed' ? 'failed' : 'unknown',
        model_calls: [],
        conversation,
      },
    ],
    turns: [],
    model_calls: [],
    tool_calls: [],
    gaps: [{ code: 'model_calls_unavailable' }, { code: 'turns_unavailable' }],
  };
}

function parseWith<T>(
  schema: {
    safeParse(
      value: unknown,
    ):
      | { success: true; data: T }
      | { success: false; error: { issues: Array<{ path: PropertyKey[]; message: string }> } };
  },
  value: unknown,
  what: string,
): T {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const problems = result.error.issues
    .slice(0, 5)
    .map((issue) => `${issue.path.map(String).join('.') || '(root)'}: ${issue.message}`)
    .join('; ');
  throw new GymError('VALIDATION_FAILED', `${what} does not match its schema: ${problems}`);
}

const isOurs = (line: Json) => isObject(line[GYM_FIELDS]) || typeof line.outcome === 'string';

/** The `ng_trajectory` record of a rollout line (ours or NeMo Gym's), checked against the schema. */
export function toNgTrajectory(line: Json): NgTrajectory {
  return parseWith(
    ngTrajectorySchema,
    isOurs(line) ? ngOfOurs(line).record : ngOfNemoGym(line),
    'the ng_trajectory export',
  );
}

const textOf = (content: unknown): string => {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .flatMap((part) =>
      isObject(part) && typeof part.text === 'string'
        ? [part.text]
        : isObject(part) && typeof part.refusal === 'string'
          ? [part.refusal]
          : [],
    )
    .join('');
};

const iso = (secondsSinceEpoch: number | null | undefined) =>
  secondsSinceEpoch == null ? undefined : new Date(Math.round(secondsSinceEpoch * 1000)).toISOString();

/**
 * An ATIF trajectory of a rollout line (ours or NeMo Gym's), checked against the schema. Its steps
 * are the conversation of the ng_trajectory record (one agent step per model turn: the text, the
 * tool calls and their outputs), its metrics the model call of each turn; the verdict, the
 * verifier's details, the timings and the harness's end are the root's `extra`.
 */
export function toAtif(line: Json): AtifTrajectory {
  const ng = toNgTrajectory(line);
  const gym = isOurs(line) ? gymFields(line) : {};
  const invocation = ng.invocations?.[0];
  const callsById = new Map((ng.model_calls ?? []).map((call) => [call.model_call_id, call]));
  const turns = (ng.turns ?? []).filter((turn) => turn.invocation_id === invocation?.invocation_id);
  const toolTimes = new Map((ng.tool_calls ?? []).map((call) => [call.tool_call_id, call]));
  const steps: AtifStep[] = [];
  // Our lines say which items each model turn produced; NeMo Gym's are read in order: an answer
  // after a tool's output, or a tool call after one, is the next turn.
  const groups = isOurs(line) ? ngOfOurs(line).groups : undefined;
  const groupAt = new Map((groups ?? []).map((group) => [group.start, group]));
  let agentTurns = 0;
  let current: AtifStep | undefined;
  // A reasoning item opens the step its answer then completes.
  let awaitingAnswer = false;
  const openAgentStep = (group?: TurnGroup): AtifStep => {
    const turn = group === undefined ? turns[agentTurns] : undefined;
    agentTurns += 1;
    const callId = group === undefined ? turn?.model_calls?.[0]?.model_call_id : group.callId;
    const timestamp = group === undefined ? turn?.timestamp : group.timestamp;
    const call = callId == null ? undefined : callsById.get(callId);
    const stats = call?.token_stats ?? {
      prompt_tokens: group?.stepUsage?.inputTokens,
      completion_tokens: group?.stepUsage?.outputTokens,
    };
    const metrics = {
      ...(stats.prompt_tokens == null ? {} : { prompt_tokens: stats.prompt_tokens }),
      ...(stats.completion_tokens == null ? {} : { completion_tokens: stats.completion_tokens }),
      ...(stats.cached_tokens == null ? {} : { cached_tokens: stats.cached_tokens }),
      ...(stats.reasoning_tokens == null ? {} : { extra: { reasoning_tokens: stats.reasoning_tokens } }),
    };
    const model = call?.response_metadata?.model;
    const step: AtifStep = {
      step_id: steps.length + 1,
      source: 'agent',
      message: '',
      ...(timestamp == null ? {} : { timestamp: iso(timestamp) }),
      ...(model == null ? {} : { model_name: model }),
      ...(Object.keys(metrics).length === 0 ? {} : { metrics }),
      ...(call === undefined
        ? {}
        : {
            llm_call_count: 1,
            extra: {
              model_call_id: call.model_call_id,
              ...(group?.tokenDrift === undefined ? {} : { token_drift: group.tokenDrift }),
            },
          }),
    };
    steps.push(step);
    return step;
  };
  const addTokens = (step: AtifStep, item: Json) => {
    if (!isIntegers(item.prompt_token_ids)) return;
    step.metrics = {
      ...step.metrics,
      prompt_token_ids: item.prompt_token_ids,
      completion_token_ids: item.generation_token_ids as number[],
      logprobs: item.generation_log_probs as number[],
    };
  };
  /** The step an item of a model turn goes in: its group's, else as the order says. */
  const stepFor = (opensTurn: boolean): AtifStep =>
    groups !== undefined
      ? (current ?? openAgentStep())
      : current === undefined || opensTurn
        ? openAgentStep()
        : current;
  for (const [position, raw] of (invocation?.conversation ?? []).entries()) {
    const item = raw as Json;
    const type = item.type ?? 'message';
    const group = groupAt.get(position);
    if (group !== undefined) {
      current = openAgentStep(group);
      awaitingAnswer = false;
    }
    if (type === 'message' && item.role !== 'assistant') {
      current = undefined;
      awaitingAnswer = false;
      steps.push({
        step_id: steps.length + 1,
        source: item.role === 'user' ? 'user' : 'system',
        message: textOf(item.content),
      });
    } else if (type === 'message') {
      current = stepFor(!awaitingAnswer);
      awaitingAnswer = false;
      current.message = textOf(item.content);
      addTokens(current, item);
    } else if (type === 'reasoning') {
      current = stepFor(true);
      awaitingAnswer = true;
      const summary = Array.isArray(item.summary)
        ? item.summary.map((part) => textOf([part])).join('\n')
        : '';
      current.reasoning_content = summary;
      addTokens(current, item);
    } else if (type === 'function_call') {
      current = stepFor(current?.observation !== undefined && !awaitingAnswer);
      awaitingAnswer = false;
      let args: Json;
      try {
        const parsed: unknown = JSON.parse(String(item.arguments));
        args = isObject(parsed) ? parsed : { value: parsed };
      } catch {
        // Arguments a model wrote that are not JSON: kept as the text they were.
        args = { raw: String(item.arguments) };
      }
      const timing = toolTimes.get(String(item.call_id));
      current.tool_calls = [
        ...(current.tool_calls ?? []),
        {
          tool_call_id: String(item.call_id),
          function_name: String(item.name),
          arguments: args,
          ...(timing === undefined
            ? {}
            : {
                extra: {
                  status: timing.status ?? 'unknown',
                  started_at: iso(timing.started_at) ?? null,
                  duration_ms: timing.duration_ms ?? null,
                  ...(timing.error_type == null ? {} : { error: timing.error_type }),
                },
              }),
        },
      ];
      addTokens(current, item);
    } else if (type === 'function_call_output') {
      const owner = [...steps]
        .reverse()
        .find((step) => step.tool_calls?.some((call) => call.tool_call_id === item.call_id));
      const target = owner ?? current ?? openAgentStep();
      target.observation = {
        results: [
          ...(target.observation?.results ?? []),
          {
            ...(owner === undefined ? {} : { source_call_id: String(item.call_id) }),
            content: typeof item.output === 'string' ? item.output : JSON.stringify(item.output),
          },
        ],
      };
    }
  }
  const usage = isObject(gym.usage) ? (gym.usage as unknown as RolloutUsage) : undefined;
  const model =
    stringOr(isObject(line.response) ? line.response.model : undefined) ??
    (ng.model_calls ?? []).map((call) => call.response_metadata?.model).find((name) => name != null) ??
    undefined;
  const agentName = stringOr(isObject(line.agent_ref) ? line.agent_ref.name : undefined) ?? 'gym';
  const params = isObject(line.responses_create_params) ? line.responses_create_params : {};
  const trajectory: AtifTrajectory = {
    schema_version: ATIF_SCHEMA_VERSION,
    session_id: ng.rollout_id,
    trajectory_id: ng.rollout_id,
    agent: {
      name: agentName,
      // The agent ran through this project's harness of that name: its version is ours.
      version: VERSION,
      ...(model === undefined ? {} : { model_name: model }),
      ...(Array.isArray(params.tools) && params.tools.length > 0
        ? { tool_definitions: params.tools.filter(isObject) }
        : {}),
    },
    steps,
    ...(usage === undefined
      ? {}
      : {
          final_metrics: {
            total_prompt_tokens: tokenCount(usage.input_tokens),
            total_completion_tokens: tokenCount(usage.output_tokens),
            total_cached_tokens: tokenCount(usage.cached_tokens),
            ...(typeof usage.cost_usd === 'number' ? { total_cost_usd: usage.cost_usd } : {}),
            total_steps: steps.length,
            extra: { model_calls: usage.calls, calls_without_usage: usage.calls_without_usage },
          },
        }),
    extra: {
      task_id: ng.task_id,
      ...(typeof line.reward === 'number' ? { reward: line.reward } : {}),
      ...(gym.outcome === undefined ? {} : { outcome: gym.outcome }),
      ...(gym.verifier === undefined ? {} : { verifier: gym.verifier }),
      ...(gym.harness === undefined ? {} : { harness: gym.harness }),
      ...(gym.timings === undefined ? {} : { timings: gym.timings }),
      ...((ng.gaps ?? []).length === 0 ? {} : { gaps: ng.gaps }),
    },
  };
  return parseWith(atifTrajectorySchema, trajectory, 'the ATIF export');
}

/** Where the trajectories of `rollouts` (FILE.jsonl) go: FILE_ng_trajectory.jsonl and FILE_atif.jsonl. */
export function trajectoryPaths(rollouts: string): Record<TrajectoryFormat, string> {
  const stem = rollouts.endsWith('.jsonl') ? rollouts.slice(0, -'.jsonl'.length) : rollouts;
  return { ng: `${stem}_ng_trajectory.jsonl`, atif: `${stem}_atif.jsonl` };
}
