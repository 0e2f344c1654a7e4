/**
 * Forwarding to an OpenAI-compatible upstream with the openai client: Chat Completions and
 * Responses calls, whole or streamed, with every field a trainer sets passed through. The agent
 * sees what the upstream sent, less what the gateway itself added to the request (a stream's
 * usage chunk, token ids: see ./token-capture.ts); the record keeps the upstream's own answer.
 * `callOpenAi` is the one upstream call of this file.
 */
import OpenAI from 'openai';
import { GATEWAY_HOP_HEADER } from './loop-guard.ts';
import type {
  ModelCallRecord,
  UpstreamAnswer,
  UpstreamCall,
  UpstreamConfig,
  UpstreamSettings,
} from './model-call.ts';
import { isObject, usageOfAnswer } from './model-call.ts';
import {
  type CallTokens,
  hideAddedInChunk,
  hideAddedInResponse,
  type TokenRequestAdded,
  tokensOfChunks,
  tokensOfResponse,
  withTokenRequest,
} from './token-capture.ts';

/** Why a Responses call has no token ids though its upstream's are asked for. */
const RESPONSES_HAVE_NO_TOKEN_IDS =
  'the Responses API returns no token ids (vLLM has them on Chat Completions only): use Chat Completions for exact tokens';

/** An openai client for one upstream; it retries 408/409/429/5xx and connection errors itself. */
export function createOpenAiClient(upstream: UpstreamConfig, settings: UpstreamSettings): OpenAI {
  return new OpenAI({
    baseURL: upstream.baseUrl,
    apiKey: upstream.apiKey ?? 'none',
    maxRetries: settings.maxRetries,
    timeout: settings.timeoutMs,
    defaultHeaders: { [GATEWAY_HOP_HEADER]: settings.hopId },
  });
}

/**
 * Puts streamed Chat Completions chunks back together into one completion (content, reasoning
 * and tool calls). Reasoning comes as `reasoning_content` (vLLM before 0.10, DeepSeek's API) or
 * `reasoning` (vLLM since); it is kept under the name it came by, as a non-streamed answer has it,
 * so a training response and a trajectory see the same message streamed or not.
 */
export function assembleChat(chunks: Array<Record<string, unknown>>): Record<string, unknown> {
  let content = '';
  const reasoning: Record<string, string> = {};
  let finishReason: unknown = null;
  let usage: unknown;
  const toolCalls: Array<{ id?: string; type: 'function'; function: { name: string; arguments: string } }> =
    [];
  for (const chunk of chunks) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of (chunk.choices as Array<Record<string, unknown>> | undefined) ?? []) {
      const delta = (choice.delta ?? {}) as Record<string, unknown>;
      if (typeof delta.content === 'string') content += delta.content;
      for (const key of ['reasoning_content', 'reasoning'])
        if (typeof delta[key] === 'string') reasoning[key] = (reasoning[key] ?? '') + delta[key];
      for (const call of (delta.tool_calls as Array<Record<string, unknown>> | undefined) ?? []) {
        const index = call.index as number;
        const fn = (call.function ?? {}) as { name?: string; arguments?: string };
        toolCalls[index] ??= { type: 'function', function: { name: '', arguments: '' } };
        if (call.id) toolCalls[index]!.id = call.id as string;
        if (fn.name) toolCalls[index]!.function.name += fn.name;
        if (fn.arguments) toolCalls[index]!.function.arguments += fn.arguments;
      }
      if (choice.finish_reason) finishReason = choice.finish_reason;
    }
  }
  return {
    object: 'chat.completion',
    choices: [
      {
        index: 0,
        message: {
          role: 'assistant',
          content: content === '' && toolCalls.length > 0 ? null : content,
          ...reasoning,
          ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
        },
        finish_reason: finishReason,
      },
    ],
    usage,
  };
}

/**
 * A Chat Completions chunk as an agent that did not ask for usage gets it: the gateway asked
 * the upstream for usage (`stream_options.include_usage`), which adds a last chunk with no
 * choices and `usage: null` on the others; without us the agent would have seen neither. Null
 * for the chunk to leave out.
 */
function withoutAddedUsage(chunk: Record<string, unknown>): Record<string, unknown> | null {
  if (!('usage' in chunk)) return chunk;
  if (Array.isArray(chunk.choices) && chunk.choices.length === 0) return null;
  const { usage: _added, ...rest } = chunk;
  return rest;
}

/** The request the upstream gets, and what the gateway added to it (to take out of the answer again). */
interface UpstreamRequest {
  body: Record<string, unknown>;
  /** What asking for token ids added. */
  added: TokenRequestAdded | undefined;
  /** Whether the agent asked for a stream's usage itself (then the usage chunk is its own). */
  isUsageAsked: boolean;
}

function upstreamRequestOf(call: UpstreamCall): UpstreamRequest {
  const streamOptions = isObject(call.request.stream_options) ? call.request.stream_options : {};
  // A Chat stream reports usage only when asked: the gateway always asks, so no call's tokens
  // go unrecorded, and takes out of what the agent sees what asking added, unless it asked too.
  const isUsageAsked = streamOptions.include_usage === true;
  const isUsageForced = call.api === 'chat.completions' && call.isStream;
  const forwarded = {
    ...call.request,
    model: call.upstreamModel,
    ...(isUsageForced ? { stream_options: { ...streamOptions, include_usage: true } } : {}),
  };
  // Tokens are asked for whatever the agent sent; what that adds is taken out of its answer.
  if (call.tokensOf !== undefined && call.api === 'chat.completions')
    return { ...withTokenRequest(forwarded), isUsageAsked };
  return { body: forwarded, added: undefined, isUsageAsked };
}

/**
 * The token fields of a call's record: Chat Completions' tokens when asked for; a Responses call
 * to an upstream whose tokens are asked for says why it has none, so a trainer does not take a
 * call without ids for one that has them.
 */
function tokenFields(
  call: UpstreamCall,
  found: () => CallTokens | { missing: string },
): Partial<ModelCallRecord> | undefined {
  if (call.api === 'chat.completions') return call.tokensOf?.(found());
  return call.upstream.requestTokenIds === true ? { tokensMissing: RESPONSES_HAVE_NO_TOKEN_IDS } : {};
}

/** A whole (not streamed) answer: the upstream's object is recorded; the agent gets it less what was added. */
function answerWhole(call: UpstreamCall, sent: UpstreamRequest, response: unknown): UpstreamAnswer {
  call.seen.usage = (response as { usage?: unknown }).usage;
  return {
    response: sent.added === undefined ? response : hideAddedInResponse(response, sent.added),
    record: {
      response,
      ...usageOfAnswer(call.seen.usage),
      ...tokenFields(call, () => tokensOfResponse(response)),
    },
  };
}

/** One streamed Chat Completions chunk as the agent gets it, or null when it is one the gateway caused. */
function chunkShown(chunk: Record<string, unknown>, sent: UpstreamRequest): Record<string, unknown> | null {
  const withoutTokens = sent.added === undefined ? chunk : hideAddedInChunk(chunk, sent.added);
  return withoutTokens === null || sent.isUsageAsked ? withoutTokens : withoutAddedUsage(withoutTokens);
}

/** A streamed answer: each event goes to the agent as it arrives; the record keeps every one and the assembled answer. */
async function relayStream(
  call: UpstreamCall,
  sent: UpstreamRequest,
  stream: AsyncIterable<Record<string, unknown>>,
): Promise<UpstreamAnswer> {
  const isChat = call.api === 'chat.completions';
  const events: unknown[] = [];
  let completed: unknown;
  for await (const event of stream) {
    events.push(event);
    if (isChat) {
      if (isObject(event.usage)) call.seen.usage = event.usage;
      const shown = chunkShown(event, sent);
      if (shown !== null) call.sink?.event(null, shown);
      continue;
    }
    call.sink?.event(event.type as string, event);
    if (
      event.type === 'response.completed' ||
      event.type === 'response.failed' ||
      event.type === 'response.incomplete'
    ) {
      completed = event.response;
      call.seen.usage = (completed as { usage?: unknown } | undefined)?.usage;
    }
  }
  call.sink?.end(isChat ? 'data: [DONE]\n\n' : undefined);
  const response = isChat ? assembleChat(events as Array<Record<string, unknown>>) : completed;
  return {
    response,
    record: {
      response,
      events,
      ...usageOfAnswer((response as { usage?: unknown } | undefined)?.usage),
      ...tokenFields(call, () => tokensOfChunks(events)),
    },
  };
}

/**
 * Forwards one Chat Completions or Responses call. Non-streamed: answers with the upstream's
 * object. Streamed: writes every chunk/event to the call's sink as it arrives and answers once
 * the stream ended.
 */
export async function callOpenAi(client: OpenAI, call: UpstreamCall): Promise<UpstreamAnswer> {
  const sent = upstreamRequestOf(call);
  const answer: unknown =
    call.api === 'chat.completions'
      ? await client.chat.completions.create(sent.body as never)
      : await client.responses.create(sent.body as never);
  return call.isStream
    ? relayStream(call, sent, answer as AsyncIterable<Record<string, unknown>>)
    : answerWhole(call, sent, answer);
}
