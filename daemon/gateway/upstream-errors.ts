/**
 * How a failed model call becomes the gateway's error: an upstream that answered with an error
 * status (429 is MODEL_RATE_LIMITED, so a trainer can back off), one that could not be reached,
 * and anything else thrown on the way. The same errors whether the openai client or the
 * gateway's own Anthropic client made the call.
 */
import OpenAI from 'openai';
import { GymError } from '../../core/errors.ts';

/** The upstream answered `upstreamStatus`; `detail` is its message or the start of its body. */
export function upstreamAnsweredError(upstreamStatus: number, detail: string, cause?: unknown): GymError {
  const code = upstreamStatus === 429 ? 'MODEL_RATE_LIMITED' : 'MODEL_UPSTREAM_ERROR';
  return new GymError(code, `the model upstream answered ${upstreamStatus}: ${detail}`, {
    details: { upstreamStatus },
    cause,
  });
}

/** The upstream could not be reached (refused, reset, timed out). */
export function upstreamUnreachableError(cause: unknown): GymError {
  return new GymError(
    'MODEL_UPSTREAM_ERROR',
    `the model upstream could not be reached: ${(cause as Error).message}`,
    { cause },
  );
}

/** Whatever a call threw, as the error its agent gets and its record keeps. */
export function toGymError(error: unknown): GymError {
  if (error instanceof GymError) return error;
  if (error instanceof OpenAI.APIError && error.status !== undefined)
    return upstreamAnsweredError(error.status, error.message, error);
  return upstreamUnreachableError(error);
}
