/**
 * What one model call is made of, as every part of the gateway sees it: the API it speaks, the
 * upstream it goes to, the stream its answer is written to, the record it leaves, and the shape
 * in which an upstream hands its answer back to the gateway (`UpstreamCall` in,
 * `UpstreamAnswer` out). Shapes and small pure helpers only; nothing here does I/O.
 */
import type { CallTokens, TokenDrift } from './token-capture.ts';

export interface UpstreamConfig {
  /** Up to and including `/v1`. */
  baseUrl: string;
  apiKey?: string;
  /** Replaces the model a client asks for (the policy being trained); recorded beside it. */
  model?: string;
  /** What the upstream speaks: OpenAI's APIs (the default) or Anthropic Messages. */
  api?: 'openai' | 'anthropic';
  /**
   * Ask the upstream for the exact token ids and logprobs of every Chat Completions call (and
   * of every Messages call translated to one), whatever the agent sent, and record them
   * (./token-capture.ts). For vLLM (0.10.2 or later); off by default, because other upstreams
   * (OpenAI's own API among them) refuse a request with fields they do not know.
   */
  requestTokenIds?: boolean;
}

export type ModelApi = 'chat.completions' | 'responses' | 'messages';

export interface ModelCallRecord {
  index: number;
  rolloutId: string;
  /** `messages.count_tokens`: a token count asked of the upstream (no model call, no usage). */
  api: ModelApi | 'messages.count_tokens';
  startedAt: string;
  durationMs: number;
  stream: boolean;
  /** The request as the agent sent it (the model field as asked). */
  request: Record<string, unknown>;
  /** The model the upstream was asked for. */
  upstreamModel: unknown;
  /** Set when the call was translated: the API the upstream was called with, and the request it got. */
  upstreamApi?: ModelApi;
  upstreamRequest?: Record<string, unknown>;
  /** Translated calls: the upstream's own (assembled) response, beside `response` as the agent got it. */
  upstreamResponse?: unknown;
  status: 'ok' | 'error';
  /** Non-streamed: the upstream's response object, unchanged. Streamed: the final object assembled. */
  response?: unknown;
  /** Streamed: every chunk or event from the upstream, unchanged (token ids and logprobs ride here). */
  events?: unknown[];
  /**
   * The upstream's usage object, in the upstream's own shape (see environments/runner/usage.ts);
   * `null` on a call the upstream answered without one (then `usageMissing` says so). A failed
   * call keeps the usage the upstream reported before it failed.
   */
  usage?: unknown;
  /** Why a call the upstream answered has no usage: its tokens are unknown, not zero. */
  usageMissing?: string;
  /**
   * The exact tokens of the call (its upstream's `requestTokenIds` on): what the policy was
   * conditioned on and sampled, with the logprobs. Also left in `response`/`events` as the
   * upstream sent them; both count against the record budget.
   */
  tokens?: CallTokens;
  /** Why a call that asked for tokens has none (the upstream did not return them). */
  tokensMissing?: string;
  /**
   * Set when this call's prompt ids start with no recent call's prompt and completion ids: the
   * history was re-tokenised into other ids than the policy produced (or the call started
   * another conversation; `matchingTokens` tells which).
   */
  tokenDrift?: TokenDrift;
  error?: { code: string; message: string; upstreamStatus?: number };
}

/**
 * A line of a rollout's records that is not a whole record (torn by a crash mid-write, or
 * damaged since), served in its place so the others are not lost with it and the call it held
 * counts as one whose usage is unknown.
 */
export interface DamagedRecord {
  rolloutId: string;
  status: 'error';
  usage: null;
  error: { code: 'RECORD_DAMAGED'; message: string };
  /** Where the line is in the records file: its number (from 1), first byte and length. */
  damaged: { line: number; offset: number; bytes: number; isTorn: boolean };
}

/** Writes one event of a stream to the agent; the route turns these into SSE. */
export interface StreamSink {
  event(name: string | null, data: unknown): void;
  end(trailer?: string): void;
}

/** What the upstream reported of a call's usage so far (a failed call keeps it in its record). */
export interface UsageSeen {
  usage?: unknown;
}

/** How the gateway reaches every upstream: the same retries, timeout and hop id for each. */
export interface UpstreamSettings {
  /** Retries on 408/409/429/5xx and connection errors, with exponential backoff. */
  maxRetries: number;
  timeoutMs: number;
  /** Sent upstream in the hop header (./loop-guard.ts); the daemon's id. */
  hopId: string;
}

/** The token fields of a call's record, from the tokens found in its answer (or why there are none). */
export type TokenFieldsOf = (
  found: CallTokens | { missing: string },
) => Pick<ModelCallRecord, 'tokens' | 'tokensMissing' | 'tokenDrift'>;

/** One call as an upstream function gets it: what to send, where a stream goes, what to note on the way. */
export interface UpstreamCall {
  /** The API the agent called. */
  api: ModelApi;
  upstream: UpstreamConfig;
  /** The request as the agent sent it (the model field as asked). */
  request: Record<string, unknown>;
  /** The model the upstream is asked for: the rollout's policy, or else the one asked. */
  upstreamModel: unknown;
  isStream: boolean;
  /** Streamed calls: where each event goes as it arrives. */
  sink: StreamSink | undefined;
  /** Filled in as the upstream reports usage, so a call that fails later keeps it. */
  seen: UsageSeen;
  /** Set when the call asks its upstream for token ids (see `asksTokenIds`). */
  tokensOf: TokenFieldsOf | undefined;
}

/** An upstream's answer to one call: what the agent gets, and what the call's record adds to its start. */
export interface UpstreamAnswer {
  response: unknown;
  record: Partial<ModelCallRecord>;
}

export const isObject = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** The usage fields of a record of a call the upstream answered: its usage, or why there is none. */
export function usageOfAnswer(usage: unknown): Pick<ModelCallRecord, 'usage' | 'usageMissing'> {
  if (isObject(usage)) return { usage };
  return { usage: null, usageMissing: 'the upstream sent no usage for this call: its tokens are unknown' };
}

/** Whether this call asks its upstream for token ids: Chat Completions, sent as such or translated from Messages. */
export function asksTokenIds(upstream: UpstreamConfig, api: ModelApi): boolean {
  if (upstream.requestTokenIds !== true || upstream.api === 'anthropic') return false;
  return api === 'chat.completions' || api === 'messages';
}

/**
 * A stream's end goes out only once its record is written: a record past the budget fails the
 * call, and the agent's stream then ends in an error event, not as a complete answer. Events
 * pass through `sink` at once; its end waits for `release`.
 */
export function holdStreamEnd(sink: StreamSink | undefined): {
  sink: StreamSink | undefined;
  release: () => void;
} {
  if (sink === undefined) return { sink: undefined, release: () => {} };
  let ending: (() => void) | undefined;
  return {
    sink: {
      event: (name, data) => sink.event(name, data),
      end: (trailer) => {
        ending = () => sink.end(trailer);
      },
    },
    release: () => ending?.(),
  };
}
