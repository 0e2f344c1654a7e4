/**
 * The model gateway: an OpenAI-compatible endpoint per rollout that forwards to the configured
 * upstream (NeMo Gym's policy_base_url / policy_api_key / policy_model_name), passes through
 * every field a trainer sets (token ids, logprobs, sampling knobs), and records every call
 * exactly: request, response (or every streamed event), usage and timing. Anthropic Messages
 * calls go to an Anthropic upstream as they are, or are translated to Chat Completions for an
 * OpenAI-compatible one.
 *
 * This file is the front the daemon and its routes use; each part lives beside it:
 * - ./rollouts.ts: open rollouts and their keys, what each remembers between calls;
 * - ./admission.ts: calls in flight and the record budget reserved at admission;
 * - ./call-journal.ts: the records, one JSON line a call, and reading them back;
 * - ./openai-upstream.ts, ./messages-via-chat.ts, ./anthropic-upstream.ts: one upstream call each;
 * - ./loop-guard.ts: no upstream may lead back to the daemon;
 * - ./request-policy.ts: what an agent's request may ask of the upstream.
 */
import { join } from 'node:path';
import { GymError } from '../../core/errors.ts';
import type { Logger } from '../../core/logger.ts';
import { admitCall, recordBoundOf } from './admission.ts';
import { callAnthropicMessages, checkAnthropicTakes, countTokensAtAnthropic } from './anthropic-upstream.ts';
import { CallJournal } from './call-journal.ts';
import { LoopGuard } from './loop-guard.ts';
import { callMessagesViaChat, estimateInputTokens } from './messages-via-chat.ts';
import {
  asksTokenIds,
  type DamagedRecord,
  holdStreamEnd,
  type ModelApi,
  type ModelCallRecord,
  type StreamSink,
  type UpstreamAnswer,
  type UpstreamCall,
  type UpstreamConfig,
} from './model-call.ts';
import { callOpenAi, createOpenAiClient } from './openai-upstream.ts';
import { checkMessagesRequest, checkOpenAiRequest, filterAnthropicHeaders } from './request-policy.ts';
import { type OpenRollout, RolloutTable, rememberResponse, rememberTokens } from './rollouts.ts';
import { toGymError } from './upstream-errors.ts';

export { MAX_CALLS_IN_FLIGHT_PER_ROLLOUT } from './admission.ts';
export { GATEWAY_HOP_HEADER } from './loop-guard.ts';
export type { DamagedRecord, ModelApi, ModelCallRecord, StreamSink, UpstreamConfig } from './model-call.ts';
export {
  MAX_RESPONSE_IDS_PER_ROLLOUT,
  type OpenRollout,
  RECENT_TOKEN_CALLS_PER_ROLLOUT,
} from './rollouts.ts';

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

/** A call once it is counted: its record's first fields and when it started (`performance.now()`). */
interface StartedCall {
  base: Omit<ModelCallRecord, 'durationMs' | 'status'>;
  started: number;
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
    options: { rolloutId?: string; upstream?: UpstreamConfig; sandboxId?: string } = {},
  ): Promise<{ rolloutId: string; key: string; basePath: string }> {
    const upstream = options.upstream ?? this.#options.upstream;
    if (upstream === undefined) {
      throw new GymError(
        'VALIDATION_FAILED',
        'no model upstream: configure gateway.upstream (or GYM_POLICY_BASE_URL), or pass one for this rollout',
      );
    }
    this.#loopGuard.checkNotSelf(upstream);
    return this.#rollouts.open(
      options.rolloutId,
      upstream,
      (rolloutId) => this.#journal.recordedBytes(rolloutId),
      options.sandboxId,
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
  authorize(rolloutId: string, presentedKey: string, arrivedFrom?: string): OpenRollout {
    return this.#rollouts.authorize(rolloutId, presentedKey, arrivedFrom);
  }

  /** Every record of a rollout; a damaged line stands as a {@link DamagedRecord} (see ./call-journal.ts). */
  async records(rolloutId: string): Promise<Array<ModelCallRecord | DamagedRecord>> {
    return this.#journal.read(rolloutId, () => this.#rollouts.has(rolloutId));
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
    const { base, started } = this.#startCall(rollout, 'messages.count_tokens', body, false);
    try {
      checkMessagesRequest(body, this.#policy);
      const response =
        rollout.upstream.api === 'anthropic'
          ? await countTokensAtAnthropic(
              this.#options,
              rollout.upstream,
              { ...body, model: base.upstreamModel },
              filterAnthropicHeaders(headers),
            )
          : estimateInputTokens(body);
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

  /**
   * Forwards one call. Non-streamed: resolves with the upstream's object. Streamed: writes every
   * chunk/event to `sink` as it arrives and resolves once the stream ended and was recorded.
   */
  async forward(
    rollout: OpenRollout,
    api: ModelApi,
    request: Record<string, unknown>,
    sink?: StreamSink,
    /** Headers of the agent's request passed on to an Anthropic upstream (anthropic-version, anthropic-beta). */
    upstreamHeaders: Record<string, string> = {},
  ): Promise<unknown> {
    checkAnthropicTakes(rollout.upstream, api);
    const { base, started } = this.#startCall(rollout, api, request, request.stream === true);
    const held = holdStreamEnd(sink);
    const call: UpstreamCall = {
      api,
      upstream: rollout.upstream,
      request,
      upstreamModel: base.upstreamModel,
      isStream: base.stream,
      sink: held.sink,
      seen: {},
      tokensOf: asksTokenIds(rollout.upstream, api)
        ? (found) => rememberTokens(rollout, base.index, found, this.#options.logger)
        : undefined,
    };
    try {
      this.#checkRequest(rollout, api, request);
      const answer = await this.#callUpstream(call, upstreamHeaders);
      await this.#journal.append(rollout, {
        ...base,
        durationMs: performance.now() - started,
        status: 'ok',
        ...answer.record,
      });
      if (api === 'responses') rememberResponse(rollout, answer.record.response);
      held.release();
      return answer.response;
    } catch (caught) {
      throw await this.#journal.appendFailure(rollout, base, started, toGymError(caught), call.seen);
    }
  }

  /** Counts a call in its rollout and starts its record. */
  #startCall(
    rollout: OpenRollout,
    api: ModelCallRecord['api'],
    request: Record<string, unknown>,
    isStream: boolean,
  ): StartedCall {
    const started = performance.now();
    const base = {
      index: rollout.calls++,
      rolloutId: rollout.id,
      api,
      startedAt: new Date().toISOString(),
      stream: isStream,
      request,
      upstreamModel: rollout.upstream.model ?? request.model,
    };
    return { base, started };
  }

  /** Refuses a request that asks the upstream for what an agent may not have (./request-policy.ts). */
  #checkRequest(rollout: OpenRollout, api: ModelApi, request: Record<string, unknown>): void {
    if (api === 'messages') checkMessagesRequest(request, this.#policy);
    else checkOpenAiRequest(api, request, this.#policy, { hasResponse: (id) => rollout.responseIds.has(id) });
  }

  /** The one place a model call goes upstream: to the upstream function for its API and its upstream's. */
  #callUpstream(call: UpstreamCall, upstreamHeaders: Record<string, string>): Promise<UpstreamAnswer> {
    if (call.api !== 'messages') return callOpenAi(createOpenAiClient(call.upstream, this.#options), call);
    if (call.upstream.api === 'anthropic')
      return callAnthropicMessages(this.#options, call, filterAnthropicHeaders(upstreamHeaders));
    return callMessagesViaChat(createOpenAiClient(call.upstream, this.#options), call);
  }

  get #policy() {
    return { allowRemoteImageUrls: this.#options.allowRemoteImageUrls === true };
  }
}
