/**
 * The model gateway: an OpenAI-compatible endpoint per rollout that forwards to the configured
 * upstream (NeMo Gym's policy_base_url / policy_api_key / policy_model_name) with the openai
 * client, passes through every field a trainer sets (token ids, logprobs, sampling knobs), and
 * records every call exactly: request, response (or every streamed event), usage and timing.
 * Records go to `<state dir>/gateway/<rolloutId>.jsonl` as they happen, so memory stays flat.
 */
import { randomBytes } from 'node:crypto';
import { appendFile, mkdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import OpenAI from 'openai';
import { GymError } from '../../core/errors.ts';
import { createId } from '../../core/ids.ts';
import type { Logger } from '../../core/logger.ts';
import { ROLLOUT_ID_PATTERN } from '../../core/schemas/api.ts';
import { tokenMatches } from '../identity.ts';

export interface UpstreamConfig {
  /** Up to and including `/v1`. */
  baseUrl: string;
  apiKey?: string;
  /** Replaces the model a client asks for (the policy being trained); recorded beside it. */
  model?: string;
}

export type ModelApi = 'chat.completions' | 'responses';

export interface ModelCallRecord {
  index: number;
  rolloutId: string;
  api: ModelApi;
  startedAt: string;
  durationMs: number;
  stream: boolean;
  /** The request as the agent sent it (the model field as asked). */
  request: Record<string, unknown>;
  /** The model the upstream was asked for. */
  upstreamModel: unknown;
  status: 'ok' | 'error';
  /** Non-streamed: the upstream's response object, unchanged. Streamed: the final object assembled. */
  response?: unknown;
  /** Streamed: every chunk or event, unchanged (token ids and logprobs ride here). */
  events?: unknown[];
  usage?: unknown;
  error?: { code: string; message: string; upstreamStatus?: number };
}

interface Rollout {
  id: string;
  key: string;
  upstream: UpstreamConfig;
  calls: number;
}

export interface GatewayOptions {
  stateDir: string;
  logger: Logger;
  upstream?: UpstreamConfig;
  /** Retries on 408/409/429/5xx and connection errors, with the openai client's exponential backoff. */
  maxRetries: number;
  timeoutMs: number;
}

/** Writes one event of a stream to the agent; the route turns these into SSE. */
export interface StreamSink {
  event(name: string | null, data: unknown): void;
  end(trailer?: string): void;
}

function toGymError(error: unknown): GymError {
  if (error instanceof GymError) return error;
  if (error instanceof OpenAI.APIError && error.status !== undefined) {
    const upstreamStatus = error.status;
    const code = upstreamStatus === 429 ? 'MODEL_RATE_LIMITED' : 'MODEL_UPSTREAM_ERROR';
    return new GymError(code, `the model upstream answered ${upstreamStatus}: ${error.message}`, {
      details: { upstreamStatus },
      cause: error,
    });
  }
  return new GymError(
    'MODEL_UPSTREAM_ERROR',
    `the model upstream could not be reached: ${(error as Error).message}`,
    { cause: error },
  );
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
  readonly #rollouts = new Map<string, Rollout>();
  readonly #directory: string;

  constructor(options: GatewayOptions) {
    this.#options = options;
    this.#directory = join(options.stateDir, 'gateway');
  }

  /** Opens a rollout: its id, and the key an agent presents as its API key. */
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
    const rolloutId = options.rolloutId ?? createId('ro');
    if (!ROLLOUT_ID_PATTERN.test(rolloutId))
      throw new GymError('VALIDATION_FAILED', `invalid rollout id "${rolloutId}"`);
    const existing = this.#rollouts.get(rolloutId);
    const key = existing?.key ?? `gym-ro-${randomBytes(24).toString('base64url')}`;
    this.#rollouts.set(rolloutId, { id: rolloutId, key, upstream, calls: existing?.calls ?? 0 });
    await mkdir(this.#directory, { recursive: true, mode: 0o700 });
    return { rolloutId, key, basePath: `/v1/gateway/${rolloutId}/v1` };
  }

  async closeRollout(rolloutId: string, options: { deleteRecords?: boolean } = {}): Promise<void> {
    this.#rollouts.delete(rolloutId);
    if (options.deleteRecords) await rm(this.#recordsPath(rolloutId), { force: true });
  }

  #recordsPath(rolloutId: string): string {
    if (!ROLLOUT_ID_PATTERN.test(rolloutId))
      throw new GymError('ROLLOUT_NOT_FOUND', `no rollout ${rolloutId}`);
    return join(this.#directory, `${rolloutId}.jsonl`);
  }

  /** The rollout whose key this is; UNAUTHORIZED otherwise (an agent never sees the daemon's token). */
  authorize(rolloutId: string, presentedKey: string): Rollout {
    const rollout = this.#rollouts.get(rolloutId);
    if (rollout === undefined) throw new GymError('ROLLOUT_NOT_FOUND', `no open rollout ${rolloutId}`);
    if (!tokenMatches(presentedKey, rollout.key))
      throw new GymError('UNAUTHORIZED', `wrong key for rollout ${rolloutId}`);
    return rollout;
  }

  async records(rolloutId: string): Promise<ModelCallRecord[]> {
    let text: string;
    try {
      text = await readFile(this.#recordsPath(rolloutId), 'utf8');
    } catch {
      if (this.#rollouts.has(rolloutId)) return [];
      throw new GymError('ROLLOUT_NOT_FOUND', `no records for rollout ${rolloutId}`);
    }
    return text
      .split('\n')
      .filter((line) => line.trim() !== '')
      .map((line) => JSON.parse(line) as ModelCallRecord);
  }

  #client(upstream: UpstreamConfig): OpenAI {
    return new OpenAI({
      baseURL: upstream.baseUrl,
      apiKey: upstream.apiKey ?? 'none',
      maxRetries: this.#options.maxRetries,
      timeout: this.#options.timeoutMs,
    });
  }

  async #record(record: ModelCallRecord): Promise<void> {
    await appendFile(this.#recordsPath(record.rolloutId), `${JSON.stringify(record)}\n`, { mode: 0o600 });
  }

  /**
   * Forwards one call. Non-streamed: resolves with the upstream's object. Streamed: writes every
   * chunk/event to `sink` as it arrives and resolves once the stream ended.
   */
  async forward(
    rollout: Rollout,
    api: ModelApi,
    request: Record<string, unknown>,
    sink?: StreamSink,
  ): Promise<unknown> {
    const index = rollout.calls++;
    const startedAt = new Date();
    const started = performance.now();
    const upstreamModel = rollout.upstream.model ?? request.model;
    const body = { ...request, model: upstreamModel };
    const isStream = request.stream === true;
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
    try {
      if (!isStream) {
        const response =
          api === 'chat.completions'
            ? await client.chat.completions.create(body as never)
            : await client.responses.create(body as never);
        await this.#record({
          ...base,
          durationMs: performance.now() - started,
          status: 'ok',
          response,
          usage: (response as { usage?: unknown }).usage,
        });
        return response;
      }
      const events: unknown[] = [];
      const stream = (api === 'chat.completions'
        ? await client.chat.completions.create(body as never)
        : await client.responses.create(body as never)) as unknown as AsyncIterable<Record<string, unknown>>;
      let completed: unknown;
      for await (const event of stream) {
        events.push(event);
        if (api === 'chat.completions') sink?.event(null, event);
        else {
          sink?.event(event.type as string, event);
          if (
            event.type === 'response.completed' ||
            event.type === 'response.failed' ||
            event.type === 'response.incomplete'
          )
            completed = event.response;
        }
      }
      sink?.end(api === 'chat.completions' ? 'data: [DONE]\n\n' : undefined);
      const response =
        api === 'chat.completions' ? assembleChat(events as Array<Record<string, unknown>>) : completed;
      await this.#record({
        ...base,
        durationMs: performance.now() - started,
        status: 'ok',
        response,
        events,
        usage: (response as { usage?: unknown } | undefined)?.usage,
      });
      return response;
    } catch (caught) {
      const error = toGymError(caught);
      this.#options.logger.warn(
        { rolloutId: rollout.id, code: error.code, error: error.message },
        'model call failed',
      );
      await this.#record({
        ...base,
        durationMs: performance.now() - started,
        status: 'error',
        error: {
          code: error.code,
          message: error.message,
          ...(typeof error.details.upstreamStatus === 'number'
            ? { upstreamStatus: error.details.upstreamStatus }
            : {}),
        },
      }).catch(() => {});
      throw error;
    }
  }
}
