/**
 * One rollout line as NeMo Gym writes it, and where our own fields go in it.
 *
 * NeMo Gym's line is the verify response of its resources server: the row's fields, `response` (a
 * Responses API object), `reward`, the server's own top-level fields (mcqa's `expected_answer` and
 * `extracted_answer`, swebench's `resolved`, ...), and its stamped `_ng_*` keys. Everything this
 * project adds (outcome, verifier details, trajectory, model calls, timings, sandbox) lives in one
 * object under {@link GYM_FIELDS}, so no row field, NeMo Gym key or verifier field can collide
 * with it, and NeMo Gym's tools read the line as one of theirs. Lines written before (our fields
 * at the top level, `response` as `{outcome, submission, message}`) are still read.
 */
import { createHash } from 'node:crypto';
import type { HarnessResult } from '../../harnesses/harness.ts';

export interface RolloutUsage {
  input_tokens: number;
  output_tokens: number;
  cached_tokens: number;
  /** Model calls recorded (failed ones included). */
  calls: number;
  /** Calls whose record has no usage (failed calls, an upstream that sends none): their tokens are not counted. */
  calls_without_usage: number;
  /** USD, from the tokens and the configured prices; absent when the prices or the counts are unknown. */
  cost_usd?: number;
}

/** The one key of a rollout line that holds this project's own fields. */
export const GYM_FIELDS = '_gym';

/** What {@link GYM_FIELDS} holds. */
export interface GymRolloutFields {
  outcome: string;
  /** The verifier's details (the test lists, the log tail, the reason a patch did not apply). */
  verifier: Record<string, unknown>;
  /** How the harness ended, and what it submitted (a patch, an answer), as it reported it. */
  harness: { outcome: string | null; submission: string | null; message: string | null };
  [key: string]: unknown;
}

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** Our fields of a line: under {@link GYM_FIELDS}, or at the top level in lines of earlier versions. */
export function gymFields(line: Json): Partial<GymRolloutFields> {
  const nested = line[GYM_FIELDS];
  if (isObject(nested)) return nested as Partial<GymRolloutFields>;
  const legacyResponse =
    isObject(line.response) && line.response.object !== 'response' ? line.response : undefined;
  return {
    ...(typeof line.outcome === 'string' ? { outcome: line.outcome } : {}),
    ...(isObject(line.verifier) ? { verifier: line.verifier } : {}),
    ...(legacyResponse === undefined
      ? {}
      : {
          harness: {
            outcome: (legacyResponse.outcome as string | null) ?? null,
            submission: (legacyResponse.submission as string | null) ?? null,
            message: (legacyResponse.message as string | null) ?? null,
          },
        }),
    ...Object.fromEntries(
      ['usage', 'trajectory', 'model_calls', 'timings', 'sandbox'].flatMap((key) =>
        line[key] === undefined ? [] : [[key, line[key]]],
      ),
    ),
  };
}

/**
 * The text of a Responses API object's output, as the Responses API's `output_text` reads it (the
 * `output_text` parts of its `message` items, joined), or null when `response` is no such object.
 */
export function responseOutputText(response: unknown): string | null {
  if (!isObject(response) || !Array.isArray(response.output)) return null;
  const texts: string[] = [];
  for (const item of response.output) {
    if (!isObject(item) || item.type !== 'message' || !Array.isArray(item.content)) continue;
    for (const part of item.content)
      if (isObject(part) && part.type === 'output_text' && typeof part.text === 'string')
        texts.push(part.text);
  }
  return texts.join('');
}

/**
 * The final output a stored line records: its Responses object's text (NeMo Gym's lines and ours),
 * else the submission of a line from an earlier version; null when it has none.
 */
export function storedOutputText(line: Json): string | null {
  // A training response's output is every turn of the rollout, not its final output.
  if (line._ng_token_capture !== undefined) return trainingFinalText(line);
  const text = responseOutputText(line.response);
  if (text !== null) return text;
  return gymFields(line).harness?.submission ?? null;
}

/**
 * The final output of a line whose `response.output` is a training response (token capture on):
 * what the harness submitted (ours), else the text of the output's last message (NeMo Gym's).
 */
function trainingFinalText(line: Json): string | null {
  const harness = gymFields(line).harness;
  if (harness !== undefined) return harness.submission ?? null;
  const output = isObject(line.response) && Array.isArray(line.response.output) ? line.response.output : [];
  const last = output.filter((item) => isObject(item) && item.type === 'message').at(-1);
  return last === undefined ? null : responseOutputText({ output: [last] });
}

/**
 * The patch a stored SWE line was graded on: NeMo Gym's top-level `model_patch`, else ours (in the
 * verifier's details, where lines of earlier versions keep it too); null when it has none.
 */
export function storedPatch(line: Json): string | null {
  if (typeof line.model_patch === 'string') return line.model_patch;
  const stored = gymFields(line).verifier ?? {};
  return typeof stored.modelPatch === 'string' ? stored.modelPatch : null;
}

export interface ResponseInputs {
  rolloutId: string;
  /** When the agent started (ms since the epoch). */
  startedAtMs: number;
  /** The model asked for, when no model call says which answered. */
  modelName: string;
  /** The row's create parameters: the request fields a Responses object echoes. */
  params: unknown;
  harnessResult: HarnessResult | undefined;
  /** The gateway's records of the rollout's model calls. */
  modelCalls: readonly unknown[];
  /** Summed from those records; undefined when the harness called no model. */
  usage: RolloutUsage | undefined;
}

const hexId = (prefix: string, seed: string) =>
  `${prefix}_${createHash('sha256').update(seed).digest('hex').slice(0, 48)}`;

/** The model that answered the last recorded call (the upstream's name), if a record says. */
function answeringModel(modelCalls: readonly unknown[]): string | undefined {
  for (const record of [...modelCalls].reverse()) {
    if (!isObject(record)) continue;
    const response = record.upstreamResponse ?? record.response;
    if (isObject(response) && typeof response.model === 'string' && response.model !== '')
      return response.model;
    if (typeof record.upstreamModel === 'string' && record.upstreamModel !== '') return record.upstreamModel;
  }
  return undefined;
}

/**
 * The `response` of a rollout line: a Responses API object built from what the agent did. Its
 * output is the agent's final output (what the harness submitted: the answer, the patch) as one
 * assistant message, none when it submitted nothing; its usage is the gateway's count of every
 * model call of the rollout (null without a model); the request fields echo the row's parameters.
 */
export function buildResponse(inputs: ResponseInputs): Json {
  const params = isObject(inputs.params) ? inputs.params : {};
  const echo = (key: string) => (params[key] === undefined ? null : params[key]);
  const result = inputs.harnessResult;
  const text = result?.submission ?? null;
  const finished = result?.outcome === 'submitted';
  const failed = result === undefined || result.outcome === 'agent_error' || result.outcome === 'infra_error';
  const usage = inputs.usage;
  return {
    id: hexId('resp', inputs.rolloutId),
    created_at: Math.round(inputs.startedAtMs) / 1000,
    error: failed
      ? { code: 'server_error', message: result?.message ?? 'the rollout ended before its agent finished' }
      : null,
    incomplete_details: null,
    instructions: echo('instructions'),
    metadata: echo('metadata'),
    model: answeringModel(inputs.modelCalls) ?? inputs.modelName,
    object: 'response',
    output:
      text === null
        ? []
        : [
            {
              id: hexId('msg', `${inputs.rolloutId}/output`),
              content: [{ annotations: [], text, type: 'output_text', logprobs: [] }],
              role: 'assistant',
              status: 'completed',
              type: 'message',
            },
          ],
    parallel_tool_calls: typeof params.parallel_tool_calls === 'boolean' ? params.parallel_tool_calls : true,
    temperature: echo('temperature'),
    tool_choice: typeof params.tool_choice === 'string' ? params.tool_choice : 'auto',
    tools: Array.isArray(params.tools) ? params.tools : [],
    top_p: echo('top_p'),
    background: null,
    conversation: null,
    max_output_tokens: echo('max_output_tokens'),
    max_tool_calls: echo('max_tool_calls'),
    previous_response_id: null,
    prompt: null,
    prompt_cache_key: null,
    reasoning: echo('reasoning'),
    safety_identifier: null,
    service_tier: null,
    status: finished ? 'completed' : failed ? 'failed' : 'incomplete',
    text: echo('text'),
    top_logprobs: echo('top_logprobs'),
    truncation: echo('truncation'),
    usage:
      usage === undefined || usage.calls === usage.calls_without_usage
        ? null
        : {
            input_tokens: usage.input_tokens,
            input_tokens_details: { cached_tokens: usage.cached_tokens },
            output_tokens: usage.output_tokens,
            output_tokens_details: { reasoning_tokens: 0 },
            total_tokens: usage.input_tokens + usage.output_tokens,
          },
    user: echo('user'),
    // Nothing of the rollout is kept upstream for a later request to build on.
    store: false,
  };
}
