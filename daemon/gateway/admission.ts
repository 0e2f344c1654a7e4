/**
 * Admission of a model call to its rollout, before a byte of it goes upstream: at most a few
 * calls in flight per rollout, and room in the rollout's record budget for what this call is
 * expected to record (reserved until it has ended and been recorded). An agent cannot grow the
 * daemon's memory, its disk or a later read of the records without bound; the hard bound is
 * kept by the call journal as records are written (./call-journal.ts).
 */
import { GymError } from '../../core/errors.ts';
import { asksTokenIds, type ModelApi } from './model-call.ts';
import type { OpenRollout } from './rollouts.ts';

/**
 * Model calls one rollout may have in flight at once: an agent waits for its model, so a few
 * allow for parallel tool calls; hundreds would only multiply the memory a rollout holds.
 */
export const MAX_CALLS_IN_FLIGHT_PER_ROLLOUT = 8;

/** Bytes of record reserved per output token a call may produce (its text, about 4 bytes, and the JSON around it). */
const RECORD_BYTES_PER_OUTPUT_TOKEN = 16;

/**
 * Bytes of record reserved per output token when tokens are asked for: its id twice (in the
 * upstream's answer and in `tokens`) and its logprob entry (token text, logprob, bytes) twice.
 */
const RECORD_BYTES_PER_OUTPUT_TOKEN_WITH_IDS = 160;

/**
 * How many times a request's bytes its prompt's ids take in a record, when tokens are asked
 * for: an id (up to 6 digits and a comma) stands for about 4 characters of text, and is
 * recorded twice (the upstream's `prompt_token_ids` and `tokens`).
 */
const PROMPT_ID_BYTES_PER_REQUEST_BYTE = 4;

/**
 * The bytes a call's record is expected to take, reserved at admission: the request; for a
 * translated Messages call also the translated request (up to twice the request: tool inputs
 * become JSON strings, escaped again); plus its answer, estimated from its output-token limit.
 * An estimate for admitting calls in flight; the hard bound is checked as records are written.
 */
export function recordBoundOf(
  rollout: OpenRollout,
  api: ModelApi,
  request: Record<string, unknown>,
  requestBytes: number,
): number {
  const isTranslated = api === 'messages' && rollout.upstream.api !== 'anthropic';
  const limit = [request.max_tokens, request.max_completion_tokens, request.max_output_tokens].find(
    (value): value is number => typeof value === 'number' && Number.isFinite(value) && value > 0,
  );
  const asksTokens = asksTokenIds(rollout.upstream, api);
  const perOutputToken = asksTokens ? RECORD_BYTES_PER_OUTPUT_TOKEN_WITH_IDS : RECORD_BYTES_PER_OUTPUT_TOKEN;
  const answer = Math.min(limit ?? 0, 1_000_000) * perOutputToken;
  const promptIds = asksTokens ? requestBytes * PROMPT_ID_BYTES_PER_REQUEST_BYTE : 0;
  return requestBytes * (isTranslated ? 3 : 1) + promptIds + answer;
}

/**
 * Admits one call: refuses it when the rollout has too many calls in flight, or when what it
 * recorded plus what calls in flight will record plus this call's bound (see `recordBoundOf`)
 * would pass `budget` (what a rollout recorded is kept whole). Returns the release function,
 * to call when the call has ended and been recorded; calling it again does nothing.
 */
export function admitCall(rollout: OpenRollout, requestBytes: number, budget: number): () => void {
  if (rollout.inFlight >= MAX_CALLS_IN_FLIGHT_PER_ROLLOUT) {
    throw new GymError(
      'CAPACITY_EXCEEDED',
      `rollout ${rollout.id} has ${rollout.inFlight} model calls in flight already (at most ${MAX_CALLS_IN_FLIGHT_PER_ROLLOUT})`,
      { details: { rolloutId: rollout.id, retryAfterMs: 1000 } },
    );
  }
  const committed = rollout.recordedBytes + rollout.reservedBytes;
  if (committed + requestBytes > budget) {
    throw new GymError(
      'PAYLOAD_TOO_LARGE',
      `rollout ${rollout.id} has recorded or reserved ${committed} bytes of model calls; this call of ${requestBytes} bytes would pass its budget of ${budget} (gateway.maxRecordBytesPerRollout)`,
      { details: { rolloutId: rollout.id, recordedBytes: committed, budget } },
    );
  }
  rollout.inFlight += 1;
  rollout.reservedBytes += requestBytes;
  let isReleased = false;
  return () => {
    if (isReleased) return;
    isReleased = true;
    rollout.inFlight -= 1;
    rollout.reservedBytes -= requestBytes;
  };
}
