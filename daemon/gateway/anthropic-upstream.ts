/**
 * Forwarding to an Anthropic upstream: Messages calls go as they are (the model replaced), whole
 * or streamed, and token counts are asked of it, over the gateway's own small HTTP client with
 * bounded retries (the openai client speaks no Messages). Such an upstream takes Messages calls
 * only. `callAnthropicMessages` and `countTokensAtAnthropic` are the upstream calls of this file.
 */
import { GymError } from '../../core/errors.ts';
import { assembleMessages } from './anthropic.ts';
import { GATEWAY_HOP_HEADER } from './loop-guard.ts';
import {
  isObject,
  type ModelApi,
  type UpstreamAnswer,
  type UpstreamCall,
  type UpstreamConfig,
  type UpstreamSettings,
  usageOfAnswer,
} from './model-call.ts';
import { readSse } from './sse-reader.ts';
import { upstreamAnsweredError, upstreamUnreachableError } from './upstream-errors.ts';

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** The Messages API version sent when the agent's request names none. */
const DEFAULT_ANTHROPIC_VERSION = '2023-06-01';

/** Refuses any call but Messages to an upstream that speaks Anthropic Messages only. */
export function checkAnthropicTakes(upstream: UpstreamConfig, api: ModelApi): void {
  if (upstream.api !== 'anthropic' || api === 'messages') return;
  throw new GymError(
    'VALIDATION_FAILED',
    `this rollout's model upstream speaks Anthropic Messages only; ${api} calls cannot reach it`,
    { details: { api } },
  );
}

/** How long to wait before retry `attempt` (from 0): the upstream's retry-after, if it gave a sane one. */
function retryDelayMs(response: Response | undefined, attempt: number): number {
  const retryAfter = Number(response?.headers.get('retry-after'));
  return Number.isFinite(retryAfter) && retryAfter > 0
    ? Math.min(retryAfter * 1000, 60_000)
    : 500 * 2 ** attempt;
}

/** POSTs to an Anthropic upstream, retrying 408/409/429/5xx and connection errors with backoff. */
async function postAnthropic(
  settings: UpstreamSettings,
  upstream: UpstreamConfig,
  path: string,
  body: Record<string, unknown>,
  headers: Record<string, string>,
): Promise<Response> {
  const url = `${upstream.baseUrl.replace(/\/+$/, '')}${path}`;
  for (let attempt = 0; ; attempt += 1) {
    const isLast = attempt >= settings.maxRetries;
    let response: Response;
    try {
      response = await fetch(url, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'anthropic-version': DEFAULT_ANTHROPIC_VERSION,
          ...headers,
          ...(upstream.apiKey === undefined ? {} : { 'x-api-key': upstream.apiKey }),
          [GATEWAY_HOP_HEADER]: settings.hopId,
        },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(settings.timeoutMs),
      });
    } catch (error) {
      if (isLast) throw upstreamUnreachableError(error);
      await sleep(retryDelayMs(undefined, attempt));
      continue;
    }
    if (response.ok) return response;
    const isRetryable = [408, 409, 429].includes(response.status) || response.status >= 500;
    const text = (await response.text().catch(() => '')).slice(0, 2000);
    if (!isRetryable || isLast) throw upstreamAnsweredError(response.status, text);
    await sleep(retryDelayMs(response, attempt));
  }
}

/** Relays an Anthropic stream's events to the agent as they arrive, keeping the usage seen so far. */
async function relayStream(response: Response, call: UpstreamCall): Promise<UpstreamAnswer> {
  const events: Array<Record<string, unknown>> = [];
  for await (const event of readSse(response.body as AsyncIterable<Uint8Array>)) {
    if (typeof event.data !== 'object' || event.data === null) continue;
    const data = event.data as Record<string, unknown>;
    events.push(data);
    // Input tokens come at the start, output tokens in message_delta: keep what came so far.
    const usage =
      data.type === 'message_start' ? (data.message as { usage?: unknown } | undefined)?.usage : data.usage;
    if (isObject(usage))
      call.seen.usage = { ...(isObject(call.seen.usage) ? call.seen.usage : {}), ...usage };
    call.sink?.event(event.name ?? String(data.type), data);
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
  call.sink?.end();
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

/**
 * A Messages call forwarded to an Anthropic upstream as it is (the model replaced), with bounded
 * retries. `headers` are the agent's Anthropic headers the upstream may see (already filtered).
 */
export async function callAnthropicMessages(
  settings: UpstreamSettings,
  call: UpstreamCall,
  headers: Record<string, string>,
): Promise<UpstreamAnswer> {
  const upstreamBody = { ...call.request, model: call.upstream.model ?? call.request.model };
  const response = await postAnthropic(settings, call.upstream, '/messages', upstreamBody, headers);
  if (call.isStream) return relayStream(response, call);
  const message = (await response.json()) as Record<string, unknown>;
  call.seen.usage = message.usage;
  return { response: message, record: { response: message, ...usageOfAnswer(message.usage) } };
}

/** An Anthropic upstream's own count of a Messages request's input tokens. */
export async function countTokensAtAnthropic(
  settings: UpstreamSettings,
  upstream: UpstreamConfig,
  body: Record<string, unknown>,
  headers: Record<string, string>,
): Promise<unknown> {
  const answer = await postAnthropic(settings, upstream, '/messages/count_tokens', body, headers);
  return answer.json();
}
