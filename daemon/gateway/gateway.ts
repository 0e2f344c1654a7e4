/**
 * The model gateway: an OpenAI-compatible endpoint per rollout that forwards to the configured
 * upstream (NeMo Gym's policy_base_url / policy_api_key / policy_model_name) with the openai
 * client, passes through every field a trainer sets (token ids, logprobs, sampling knobs), and
 * records every call exactly: request, response (or every streamed event), usage and timing.
 * Records go to `<state dir>/gateway/<rolloutId>.jsonl` as they happen, so memory stays flat.
 * Anthropic Messages calls go to an Anthropic upstream as they are, or are translated to Chat
 * Completions for an OpenAI-compatible one (./anthropic.ts).
 */
import { join } from 'node:path';
import OpenAI from 'openai';
import { GymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import { admitCall, recordBoundOf } from './admission.ts';
import {
  assembleMessages,
  ChatToMessagesStream,
  chatToMessagesResponse,
  type MessagesEvent,
  messagesToChatRequest,
  readSse,
} from './anthropic.ts';
import { CallJournal } from './call-journal.ts';
import { GATEWAY_HOP_HEADER, LoopGuard } from './loop-guard.ts';
import {
  asksTokenIds,
  type DamagedRecord,
  isObject,
  type ModelApi,
  type ModelCallRecord,
  type StreamSink,
  type UpstreamConfig,
  type UsageSeen,
  usageOfAnswer,
} from './model-call.ts';
import { checkMessagesRequest, checkOpenAiRequest, filterAnthropicHeaders } from './request-policy.ts';
import { type OpenRollout, RolloutTable, rememberResponse, rememberTokens } from './rollouts.ts';
import {
  type CallTokens,
  hideAddedInChunk,
  hideAddedInResponse,
  type TokenRequestAdded,
  tokensOfChunks,
  tokensOfResponse,
  withTokenRequest,
} from './token-capture.ts';
import { toGymError, upstreamAnsweredError, upstreamUnreachableError } from './upstream-errors.ts';

export { MAX_CALLS_IN_FLIGHT_PER_ROLLOUT } from './admission.ts';
export { GATEWAY_HOP_HEADER } from './loop-guard.ts';
export type { DamagedRecord, ModelApi, ModelCallRecord, StreamSink, UpstreamConfig } from './model-call.ts';
export {
  MAX_RESPONSE_IDS_PER_ROLLOUT,
  type OpenRollout,
  RECENT_TOKEN_CALLS_PER_ROLLOUT,
} from './rollouts.ts';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Why a Responses call has no token ids though its upstream's are asked for. */
const RESPONSES_HAVE_NO_TOKEN_IDS =
  'the Responses API returns no token ids (vLLM has them on Chat Completions only): use Chat Completions for exact tokens';

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

export interface GatewayOptions {
  stateDir: string;
  logger: Logger;
  upstream?: UpstreamConfig;
  /** Retries on 408/409/429/5xx and connection errors, with the openai client's exponential backoff. */
  maxRetries: number;
  timeoutMs: number;
  /** Sent upstream in the hop header; the daemon's id. */
  hopId: string;
  /** The record budget of one rollout, in bytes (see the config's gateway.maxRecordBytesPerRollout). */
  maxRecordBytesPerRollout: number;
  /** Pass image and document URLs (the upstream downloads them) instead of refusing them. */
  allowRemoteImageUrls?: boolean;
}

/** Puts streamed Chat Completions chunks back together into one completion (content and tool calls). */
function assembleChat(chunks: Array<Record<string, unknown>>): Record<string, unknown> {
  let content = '';
  let finishReason: unknown = null;
  let usage: unknown;
  const toolCalls: Array<{ id?: string; type: 'function'; function: { name: string; arguments: string } }> =
    [];
  for (const chunk of chunks) {
    if (chunk.usage) usage = chunk.usage;
    for (const choice of (chunk.choices as Array<Record<string, unknown>> | undefined) ?? []) {
      const delta = (choice.delta ?? {}) as Record<string, unknown>;
      if (typeof delta.content === 'string') content += delta.content;
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
          ...(toolCalls.length > 0 ? { tool_calls: toolCalls } : {}),
        },
        finish_reason: finishReason,
      },
    ],
    usage,
  };
}

export class ModelGateway {
  readonly #options: GatewayOptions;
  readonly #rollouts = new RolloutTable();
  readonly #journal: CallJournal;
  readonly #loopGuard = new LoopGuard();

  constructor(options: GatewayOptions) {
    this.#options = options;
    this.#journal = new CallJournal({
      directory: join(options.stateDir, 'gateway'),
      logger: options.logger,
      maxRecordBytesPerRollout: options.maxRecordBytesPerRollout,
    });
  }

  /** The value of the hop header this gateway sends upstream. */
  get hopId(): string {
    return this.#options.hopId;
  }

  /** Tells the gateway where the daemon listens; the configured upstream is checked against it. */
  setSelfAddresses(addresses: Array<{ host: string; port: number }>): void {
    this.#loopGuard.setSelfAddresses(addresses);
    if (this.#options.upstream !== undefined) this.#loopGuard.checkNotSelf(this.#options.upstream);
  }

  /**
   * Opens a rollout: its id, and the key an agent presents as its API key. Only the daemon token
   * reaches this. A rollout that is open already is a ROLLOUT_CONFLICT: a key is handed out once.
   */
  async openRollout(
    options: { rolloutId?: string; upstream?: UpstreamConfig } = {},
  ): Promise<{ rolloutId: string; key: string; basePath: string }> {
    const upstream = options.upstream ?? this.#options.upstream;
    if (upstream === undefined) {
      throw new GymError(
        'VALIDATION_FAILED',
        'no model upstream: configure gateway.upstream (or GYM_POLICY_BASE_URL), or pass one for this rollout',
      );
    }
    this.#loopGuard.checkNotSelf(upstream);
    return this.#rollouts.open(options.rolloutId, upstream, (rolloutId) =>
      this.#journal.recordedBytes(rolloutId),
    );
  }

  /** The bytes a call's record is expected to take, reserved at admission (see ./admission.ts). */
  recordBound(
    rollout: OpenRollout,
    api: ModelApi,
    request: Record<string, unknown>,
    requestBytes: number,
  ): number {
    return recordBoundOf(rollout, api, request, requestBytes);
  }

  /**
   * Admits one call against the rollout's calls in flight and record budget (see ./admission.ts).
   * Returns the release function, to call when the call has ended and been recorded.
   */
  admit(rollout: OpenRollout, requestBytes: number): () => void {
    return admitCall(rollout, requestBytes, this.#options.maxRecordBytesPerRollout);
  }

  async closeRollout(rolloutId: string, options: { deleteRecords?: boolean } = {}): Promise<void> {
    this.#rollouts.close(rolloutId);
    if (!options.deleteRecords) return;
    await this.#journal.delete(rolloutId);
  }

  /**
   * The rollout whose key this is; UNAUTHORIZED otherwise (an agent never sees the daemon's
   * token), the same for an unknown rollout and a wrong key.
   */
  authorize(rolloutId: string, presentedKey: string): OpenRollout {
    return this.#rollouts.authorize(rolloutId, presentedKey);
  }

  /** Every record of a rollout; a damaged line stands as a {@link DamagedRecord} (see ./call-journal.ts). */
  async records(rolloutId: string): Promise<Array<ModelCallRecord | DamagedRecord>> {
    return this.#journal.read(rolloutId, () => this.#rollouts.has(rolloutId));
  }

  #client(upstream: UpstreamConfig): OpenAI {
    return new OpenAI({
      baseURL: upstream.baseUrl,
      apiKey: upstream.apiKey ?? 'none',
      maxRetries: this.#options.maxRetries,
      timeout: this.#options.timeoutMs,
      defaultHeaders: { [GATEWAY_HOP_HEADER]: this.#options.hopId },
    });
  }

  /**
   * A Messages call translated to Chat Completions for an OpenAI-compatible upstream, and its
   * answer (or stream) translated back.
   */
  async #messagesToChat(
    client: OpenAI,
    body: Record<string, unknown>,
    upstreamModel: unknown,
    isStream: boolean,
    sink: StreamSink | undefined,
    seen: UsageSeen,
    tokensOf: ((found: CallTokens | { missing: string }) => Partial<ModelCallRecord>) | undefined,
  ): Promise<{ response: unknown; record: Partial<ModelCallRecord> }> {
    const translated = messagesToChatRequest(body, upstreamModel);
    // The Messages response is built from content alone, so the token fields never reach the agent.
    const upstreamRequest = tokensOf === undefined ? translated : withTokenRequest(translated).body;
    const asked = body.model;
    if (!isStream) {
      const completion = (await client.chat.completions.create(
        upstreamRequest as never,
      )) as unknown as Record<string, unknown>;
      seen.usage = completion.usage;
      const response = chatToMessagesResponse(completion, asked);
      return {
        response,
        record: {
          upstreamApi: 'chat.completions',
          upstreamRequest,
          upstreamResponse: completion,
          response,
          ...usageOfAnswer(completion.usage),
          ...tokensOf?.(tokensOfResponse(completion)),
        },
      };
    }
    const stream = (await client.chat.completions.create(
      upstreamRequest as never,
    )) as unknown as AsyncIterable<Record<string, unknown>>;
    const translator = new ChatToMessagesStream(asked);
    const chunks: Array<Record<string, unknown>> = [];
    const sent: Array<Record<string, unknown>> = [];
    const send = (events: MessagesEvent[]) => {
      for (const event of events) {
        sent.push(event.data);
        sink?.event(event.name, event.data);
      }
    };
    for await (const chunk of stream) {
      chunks.push(chunk);
      if (isObject(chunk.usage)) seen.usage = chunk.usage;
      send(translator.push(chunk));
    }
    send(translator.finish());
    sink?.end();
    const completion = assembleChat(chunks);
    const response = assembleMessages(sent);
    return {
      response,
      record: {
        upstreamApi: 'chat.completions',
        upstreamRequest,
        upstreamResponse: completion,
        response,
        events: chunks,
        ...usageOfAnswer(completion.usage),
        ...tokensOf?.(tokensOfChunks(chunks)),
      },
    };
  }

  /** A Messages call forwarded to an Anthropic upstream as it is (the model replaced), with bounded retries. */
  async #messagesToAnthropic(
    upstream: UpstreamConfig,
    body: Record<string, unknown>,
    isStream: boolean,
    sink: StreamSink | undefined,
    headers: Record<string, string>,
    seen: UsageSeen,
  ): Promise<{ response: unknown; record: Partial<ModelCallRecord> }> {
    const upstreamBody = { ...body, model: upstream.model ?? body.model };
    const response = await this.#postAnthropic(upstream, '/messages', upstreamBody, headers);
    if (!isStream) {
      const message = (await response.json()) as Record<string, unknown>;
      seen.usage = message.usage;
      return { response: message, record: { response: message, ...usageOfAnswer(message.usage) } };
    }
    const events: Array<Record<string, unknown>> = [];
    for await (const event of readSse(response.body as AsyncIterable<Uint8Array>)) {
      if (typeof event.data !== 'object' || event.data === null) continue;
      const data = event.data as Record<string, unknown>;
      events.push(data);
      // Input tokens come at the start, output tokens in message_delta: keep what came so far.
      const usage =
        data.type === 'message_start' ? (data.message as { usage?: unknown } | undefined)?.usage : data.usage;
      if (isObject(usage)) seen.usage = { ...(isObject(seen.usage) ? seen.usage : {}), ...usage };
      sink?.event(event.name ?? String(data.type), data);
      if (data.type === 'error') {
        const error = (data.error ?? {}) as { message?: string; type?: string };
        throw new GymError(
          'MODEL_UPSTREAM_ERROR',
          `the model upstream failed mid-stream: ${error.type ?? 'error'}: ${error.message ?? ''}`,
        );
      }
    }
    // A stream cut before message_stop is not an answer (the agent gets an error event instead).
    if (events.at(-1)?.type !== 'message_stop')
      throw new GymError('MODEL_UPSTREAM_ERROR', 'the model upstream ended its stream before message_stop');
    sink?.end();
    const message = assembleMessages(events);
    return {
      response: message,
      record: {
        response: message,
        events,
        ...usageOfAnswer((message as { usage?: unknown } | undefined)?.usage),
      },
    };
  }

  /** POSTs to an Anthropic upstream, retrying 408/409/429/5xx and connection errors with backoff. */
  async #postAnthropic(
    upstream: UpstreamConfig,
    path: string,
    body: Record<string, unknown>,
    headers: Record<string, string>,
  ): Promise<Response> {
    const url = `${upstream.baseUrl.replace(/\/+$/, '')}${path}`;
    for (let attempt = 0; ; attempt += 1) {
      const isLast = attempt >= this.#options.maxRetries;
      let response: Response;
      try {
        response = await fetch(url, {
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'anthropic-version': '2023-06-01',
            ...headers,
            ...(upstream.apiKey === undefined ? {} : { 'x-api-key': upstream.apiKey }),
            [GATEWAY_HOP_HEADER]: this.#options.hopId,
          },
          body: JSON.stringify(body),
          signal: AbortSignal.timeout(this.#options.timeoutMs),
        });
      } catch (error) {
        if (isLast) throw upstreamUnreachableError(error);
        await sleep(500 * 2 ** attempt);
        continue;
      }
      if (response.ok) return response;
      const isRetryable = [408, 409, 429].includes(response.status) || response.status >= 500;
      const text = (await response.text().catch(() => '')).slice(0, 2000);
      if (!isRetryable || isLast) throw upstreamAnsweredError(response.status, text);
      const retryAfter = Number(response.headers.get('retry-after'));
      await sleep(
        Number.isFinite(retryAfter) && retryAfter > 0
          ? Math.min(retryAfter * 1000, 60_000)
          : 500 * 2 ** attempt,
      );
    }
  }

  /**
   * Counts a Messages request's input tokens: an Anthropic upstream's own count; for an
   * OpenAI-compatible upstream, which has no such call, an estimate (a quarter of the request's
   * characters), said to be one in `estimated`.
   */
  async countTokens(
    rollout: OpenRollout,
    body: Record<string, unknown>,
    headers: Record<string, string> = {},
  ): Promise<unknown> {
    const started = performance.now();
    const upstreamModel = rollout.upstream.model ?? body.model;
    const base = {
      index: rollout.calls++,
      rolloutId: rollout.id,
      api: 'messages.count_tokens' as const,
      startedAt: new Date().toISOString(),
      stream: false,
      request: body,
      upstreamModel,
    };
    try {
      checkMessagesRequest(body, this.#policy);
      let response: unknown;
      if (rollout.upstream.api === 'anthropic') {
        const answer = await this.#postAnthropic(
          rollout.upstream,
          '/messages/count_tokens',
          { ...body, model: upstreamModel },
          filterAnthropicHeaders(headers),
        );
        response = await answer.json();
      } else {
        const text = JSON.stringify({ system: body.system, messages: body.messages, tools: body.tools });
        response = { input_tokens: Math.ceil(text.length / 4), estimated: true };
      }
      await this.#journal.append(rollout, {
        ...base,
        durationMs: performance.now() - started,
        status: 'ok',
        response,
      });
      return response;
    } catch (caught) {
      throw await this.#journal.appendFailure(rollout, base, started, toGymError(caught));
    }
  }

  get #policy() {
    return { allowRemoteImageUrls: this.#options.allowRemoteImageUrls === true };
  }

  /**
   * Forwards one call. Non-streamed: resolves with the upstream's object. Streamed: writes every
   * chunk/event to `sink` as it arrives and resolves once the stream ended.
   */
  async forward(
    rollout: OpenRollout,
    api: ModelApi,
    request: Record<string, unknown>,
    sink?: StreamSink,
    /** Headers of the agent's request passed on to an Anthropic upstream (anthropic-version, anthropic-beta). */
    upstreamHeaders: Record<string, string> = {},
  ): Promise<unknown> {
    const isAnthropicUpstream = rollout.upstream.api === 'anthropic';
    if (isAnthropicUpstream && api !== 'messages') {
      throw new GymError(
        'VALIDATION_FAILED',
        `this rollout's model upstream speaks Anthropic Messages only; ${api} calls cannot reach it`,
        { details: { api } },
      );
    }
    const index = rollout.calls++;
    const startedAt = new Date();
    const started = performance.now();
    const upstreamModel = rollout.upstream.model ?? request.model;
    const isStream = request.stream === true;
    const streamOptions = isObject(request.stream_options) ? request.stream_options : {};
    // A Chat stream reports usage only when asked: the gateway always asks, so no call's tokens
    // go unrecorded, and takes out of what the agent sees what asking added, unless it asked too.
    const isUsageAsked = streamOptions.include_usage === true;
    const isUsageForced = api === 'chat.completions' && isStream;
    const forwarded = {
      ...request,
      model: upstreamModel,
      ...(isUsageForced ? { stream_options: { ...streamOptions, include_usage: true } } : {}),
    };
    // Tokens are asked for whatever the agent sent; what that adds is taken out of its answer.
    const asksTokens = asksTokenIds(rollout.upstream, api);
    let added: TokenRequestAdded | undefined;
    let body: Record<string, unknown> = forwarded;
    if (asksTokens && api === 'chat.completions') ({ body, added } = withTokenRequest(forwarded));
    const tokensOf = asksTokens
      ? (found: CallTokens | { missing: string }) =>
          rememberTokens(rollout, index, found, this.#options.logger)
      : undefined;
    // A trainer must not take a call without ids for one that has them: a Responses call to an
    // upstream whose tokens are asked for says why it has none.
    const noTokens: Pick<ModelCallRecord, 'tokensMissing'> =
      rollout.upstream.requestTokenIds === true && api === 'responses'
        ? { tokensMissing: RESPONSES_HAVE_NO_TOKEN_IDS }
        : {};
    const seen: UsageSeen = {};
    const base = {
      index,
      rolloutId: rollout.id,
      api,
      startedAt: startedAt.toISOString(),
      stream: isStream,
      request,
      upstreamModel,
    };
    const client = this.#client(rollout.upstream);
    // A stream's end goes out only once its record is written: a record past the budget fails
    // the call, and the agent's stream then ends in an error event, not as a complete answer.
    let ending: (() => void) | undefined;
    const held: StreamSink | undefined =
      sink === undefined
        ? undefined
        : {
            event: (name, data) => sink.event(name, data),
            end: (trailer) => {
              ending = () => sink.end(trailer);
            },
          };
    try {
      if (api === 'messages') checkMessagesRequest(request, this.#policy);
      else
        checkOpenAiRequest(api, request, this.#policy, { hasResponse: (id) => rollout.responseIds.has(id) });
      if (api === 'messages') {
        const done = isAnthropicUpstream
          ? await this.#messagesToAnthropic(
              rollout.upstream,
              request,
              isStream,
              held,
              filterAnthropicHeaders(upstreamHeaders),
              seen,
            )
          : await this.#messagesToChat(client, request, upstreamModel, isStream, held, seen, tokensOf);
        await this.#journal.append(rollout, {
          ...base,
          ...done.record,
          durationMs: performance.now() - started,
          status: 'ok',
        });
        ending?.();
        return done.response;
      }
      if (!isStream) {
        const response =
          api === 'chat.completions'
            ? await client.chat.completions.create(body as never)
            : await client.responses.create(body as never);
        seen.usage = (response as { usage?: unknown }).usage;
        await this.#journal.append(rollout, {
          ...base,
          durationMs: performance.now() - started,
          status: 'ok',
          response,
          ...usageOfAnswer(seen.usage),
          ...(api === 'chat.completions' ? tokensOf?.(tokensOfResponse(response)) : noTokens),
        });
        if (api === 'responses') rememberResponse(rollout, response);
        return added === undefined ? response : hideAddedInResponse(response, added);
      }
      const events: unknown[] = [];
      const stream = (api === 'chat.completions'
        ? await client.chat.completions.create(body as never)
        : await client.responses.create(body as never)) as unknown as AsyncIterable<Record<string, unknown>>;
      let completed: unknown;
      for await (const event of stream) {
        events.push(event);
        if (api === 'chat.completions') {
          if (isObject(event.usage)) seen.usage = event.usage;
          const withoutTokens = added === undefined ? event : hideAddedInChunk(event, added);
          const shown =
            withoutTokens === null || isUsageAsked ? withoutTokens : withoutAddedUsage(withoutTokens);
          if (shown !== null) held?.event(null, shown);
        } else {
          held?.event(event.type as string, event);
          if (
            event.type === 'response.completed' ||
            event.type === 'response.failed' ||
            event.type === 'response.incomplete'
          ) {
            completed = event.response;
            seen.usage = (completed as { usage?: unknown } | undefined)?.usage;
          }
        }
      }
      held?.end(api === 'chat.completions' ? 'data: [DONE]\n\n' : undefined);
      const response =
        api === 'chat.completions' ? assembleChat(events as Array<Record<string, unknown>>) : completed;
      await this.#journal.append(rollout, {
        ...base,
        durationMs: performance.now() - started,
        status: 'ok',
        response,
        events,
        ...usageOfAnswer((response as { usage?: unknown } | undefined)?.usage),
        ...(api === 'chat.completions' ? tokensOf?.(tokensOfChunks(events)) : noTokens),
      });
      if (api === 'responses') rememberResponse(rollout, response);
      ending?.();
      return response;
    } catch (caught) {
      throw await this.#journal.appendFailure(rollout, base, started, toGymError(caught), seen);
    }
  }
}
