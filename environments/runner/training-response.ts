/**
 * The training response of a rollout: from the gateway's records of its model calls, the
 * `response.output` NeMo Gym's token capture would rebuild (`token-chains.ts`), with its
 * per-rollout capture metrics and whether the sample must be masked, and why. A run that asked
 * for token ids writes these in its lines (`rollout-record.ts`); nothing here does I/O.
 *
 * A call whose ids are lost is a hole in the sequence: its generated tokens reach the next
 * prompt, where they would be trained on as if the environment had written them. So a rollout
 * with any such call (the upstream gave no ids or no logprobs, the call failed, its record is
 * damaged, the records could not be read, or the gateway never asked for ids) is masked with
 * the reason, never filled in from text.
 */
import { buildChains, findContiguityBreak, projectChain, roundTo4, type TokenCall } from './token-chains.ts';

type Json = Record<string, unknown>;

const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const isIntegers = (value: unknown): value is number[] =>
  Array.isArray(value) && value.every((item) => Number.isInteger(item));

const isNumbers = (value: unknown): value is number[] =>
  Array.isArray(value) && value.every((item) => typeof item === 'number');

/** The key of a line's capture metrics, as NeMo Gym names it. */
export const TOKEN_CAPTURE_KEY = '_ng_token_capture';

/** The line's key a trainer reads to leave a sample out of the loss, as NeMo Gym names it. */
export const MASK_SAMPLE_KEY = 'mask_sample';

/** A call of the rollout whose ids the training response cannot have. */
export interface LostCall {
  /** The call's index in the rollout (its record's), or null when the record does not say. */
  call: number | null;
  reason: string;
}

/** Per-rollout capture metrics: NeMo Gym's names, then ours. */
export interface CaptureMetrics {
  n_calls: number;
  chains?: number;
  roots?: number;
  quarantined_calls?: number;
  quarantined_fraction?: number;
  delivered_fraction?: number;
  generated_tokens_captured?: number;
  generated_tokens_delivered?: number;
  empty_generation_calls?: number;
  /** Set when a call's ids were lost. */
  capture_incomplete?: true;
  /** Why no training response could be built (then `response.output` is left as it was). */
  error?: string;
  /** Ours: the calls whose ids were lost, and why. */
  lost_calls: LostCall[];
  /** Ours: every reason the sample is masked; empty when it is not. */
  mask_reasons: string[];
}

export interface TrainingCapture {
  /** The rebuilt `response.output` (the main chain, token fields contiguous); undefined when none could be built. */
  output?: Array<Record<string, unknown>>;
  metrics: CaptureMetrics;
  maskSample: boolean;
}

/** A call's id for the builder: its index zero-padded, so text order is call order. */
export function callIdOf(index: number): string {
  return `call-${String(index).padStart(6, '0')}`;
}

function stringOf(value: unknown): string {
  if (typeof value === 'string') return value;
  if (Array.isArray(value))
    return value.map((part) => (isObject(part) && typeof part.text === 'string' ? part.text : '')).join('');
  return '';
}

/**
 * A Chat Completions answer's first choice as Responses output items: its reasoning, its text,
 * then each tool call, in the order the model generated them. The tokens belong to the last
 * (the generation ends with it).
 */
export function outputItemsOf(response: unknown, callId: string): Array<Record<string, unknown>> {
  if (!isObject(response) || !Array.isArray(response.choices)) return [];
  const choice = response.choices.find((item) => isObject(item) && (item.index ?? 0) === 0);
  if (!isObject(choice) || !isObject(choice.message)) return [];
  const message = choice.message;
  const items: Array<Record<string, unknown>> = [];
  const reasoning = stringOf(message.reasoning_content ?? message.reasoning);
  if (reasoning !== '')
    items.push({
      id: `rs_${callId}`,
      type: 'reasoning',
      summary: [{ type: 'summary_text', text: reasoning }],
    });
  const text = stringOf(message.content);
  if (text !== '')
    items.push({
      id: `msg_${callId}`,
      type: 'message',
      role: 'assistant',
      status: 'completed',
      content: [{ type: 'output_text', text, annotations: [] }],
    });
  const toolCalls = Array.isArray(message.tool_calls) ? message.tool_calls : [];
  for (const [position, toolCall] of toolCalls.entries()) {
    if (!isObject(toolCall)) continue;
    const fn = isObject(toolCall.function) ? toolCall.function : {};
    items.push({
      id: `fc_${callId}_${position}`,
      type: 'function_call',
      call_id: typeof toolCall.id === 'string' ? toolCall.id : `${callId}_${position}`,
      name: typeof fn.name === 'string' ? fn.name : '',
      arguments: typeof fn.arguments === 'string' ? fn.arguments : JSON.stringify(fn.arguments ?? {}),
      status: 'completed',
    });
  }
  return items;
}

/** When a call's answer was complete, in seconds since the epoch (0 when its record does not say). */
function completedAtOf(record: Json): number {
  const started = typeof record.startedAt === 'string' ? Date.parse(record.startedAt) : Number.NaN;
  if (Number.isNaN(started)) return 0;
  const durationMs = typeof record.durationMs === 'number' ? record.durationMs : 0;
  return (started + durationMs) / 1000;
}

/** A record as a call with tokens, or why its ids are lost; null for a record that is no model call. */
export function tokenCallOf(record: unknown, position: number): TokenCall | LostCall | null {
  if (!isObject(record)) return { call: null, reason: `record ${position + 1} is not a record` };
  const index = typeof record.index === 'number' ? record.index : null;
  const lost = (reason: string): LostCall => ({ call: index, reason });
  // A token count asked of the upstream generates nothing.
  if (record.api === 'messages.count_tokens') return null;
  const error = isObject(record.error) ? record.error : undefined;
  if (error?.code === 'RECORD_DAMAGED') return lost('its record is damaged, so its ids are unknown');
  if (record.status !== 'ok')
    return lost(
      `the call failed (${String(error?.code ?? 'unknown')}): what the model generated for it, if anything, is unknown`,
    );
  if (typeof record.tokensMissing === 'string') return lost(`no token ids: ${record.tokensMissing}`);
  const tokens = record.tokens;
  if (!isObject(tokens))
    return lost(
      "the gateway did not ask the upstream for token ids (its upstream's requestTokenIds is off: give the run's own --policy-base-url with --token-ids)",
    );
  if (!isIntegers(tokens.promptTokenIds) || !isIntegers(tokens.completionTokenIds))
    return lost('its recorded token ids are not lists of integers');
  const logprobs = tokens.completionLogprobs;
  if (!isNumbers(logprobs) || logprobs.length !== tokens.completionTokenIds.length)
    return lost('the upstream returned no logprob for each generated id');
  const callId = callIdOf(index ?? position);
  const outputItems = outputItemsOf(record.upstreamResponse ?? record.response, callId);
  return {
    callId,
    promptTokenIds: tokens.promptTokenIds,
    generationTokenIds: tokens.completionTokenIds,
    generationLogProbs: logprobs,
    outputItems,
    ...(outputItems.length === 0 ? {} : { tokenItemIndex: outputItems.length - 1 }),
    completedAt: completedAtOf(record),
  };
}

/**
 * The training response of a rollout from its records. `recordsError` is set when the records
 * could not be read (then nothing is known of its calls).
 */
export function buildTrainingCapture(records: readonly unknown[], recordsError?: string): TrainingCapture {
  const calls: TokenCall[] = [];
  const lostCalls: LostCall[] = [];
  for (const [position, record] of records.entries()) {
    const found = tokenCallOf(record, position);
    if (found === null) continue;
    if ('reason' in found) lostCalls.push(found);
    else calls.push(found);
  }
  const reasons: string[] = [];
  if (recordsError !== undefined) reasons.push(`the model calls' records could not be read: ${recordsError}`);
  for (const lost of lostCalls) reasons.push(`call ${lost.call ?? '?'} lost its token ids: ${lost.reason}`);
  const isIncomplete = recordsError !== undefined || lostCalls.length > 0;
  const incomplete = isIncomplete ? { capture_incomplete: true as const } : {};

  const failed = (error: string): TrainingCapture => ({
    metrics: {
      n_calls: calls.length,
      ...incomplete,
      error,
      lost_calls: lostCalls,
      mask_reasons: [...reasons, error],
    },
    maskSample: true,
  });
  if (calls.length === 0) return failed('no model call of the rollout recorded token ids');

  const build = buildChains(calls);
  const main = build.chains.find((chain) => chain.chainId === 'main');
  if (main === undefined)
    return failed(
      build.notes.emptyGenerationCalls.length === calls.length
        ? 'no call generated any token'
        : 'no chain is free of quarantined calls',
    );
  const output = projectChain(main);
  // The projection is contiguous by construction; checked as NeMo Gym checks it, never assumed.
  const brokenAt = findContiguityBreak(output);
  if (brokenAt !== undefined)
    return failed(`output item ${brokenAt}'s prompt ids do not extend the ids before it`);

  const { notes } = build;
  if (notes.unresolvedRetries.length > 0)
    reasons.push(
      `calls ${notes.unresolvedRetries.join(', ')} share one prompt and no later call tells which answer the agent kept`,
    );
  if (notes.roots !== 1)
    reasons.push(
      `${notes.roots} calls start a sequence of their own (a rewritten, compacted or re-tokenised history, or a side conversation): only one chain is delivered`,
    );
  if (notes.chains !== 1)
    reasons.push(
      `${notes.chains} chains; only the main one is delivered (${notes.generatedTokensDelivered} of ${notes.generatedTokensCaptured} generated tokens)`,
    );
  return {
    output,
    metrics: {
      n_calls: calls.length,
      chains: notes.chains,
      roots: notes.roots,
      quarantined_calls: build.quarantined.length,
      quarantined_fraction: roundTo4(build.quarantined.length / calls.length),
      delivered_fraction: notes.deliveredFraction,
      generated_tokens_captured: notes.generatedTokensCaptured,
      generated_tokens_delivered: notes.generatedTokensDelivered,
      empty_generation_calls: notes.emptyGenerationCalls.length,
      ...incomplete,
      lost_calls: lostCalls,
      mask_reasons: reasons,
    },
    maskSample: reasons.length > 0,
  };
}
