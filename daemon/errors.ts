/**
 * Turns anything a route throws into the API's error shape. Fastify's own errors (bad JSON,
 * body too large) map to our codes; anything else unknown is INTERNAL. An error's own
 * `statusCode` (dockerode's, say) is never used: that is how an engine's 404 would otherwise
 * become ours.
 */
import { type ErrorCode, GymError } from '../core/errors.ts';

const FASTIFY_CODES: Record<string, ErrorCode> = {
  FST_ERR_CTP_INVALID_JSON_BODY: 'VALIDATION_FAILED',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'VALIDATION_FAILED',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'VALIDATION_FAILED',
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'VALIDATION_FAILED',
  FST_ERR_CTP_INVALID_TYPE: 'VALIDATION_FAILED',
  FST_ERR_VALIDATION: 'VALIDATION_FAILED',
  FST_ERR_CTP_BODY_TOO_LARGE: 'PAYLOAD_TOO_LARGE',
  // The router's: a malformed escape in the path, a path parameter over its length limit.
  FST_ERR_BAD_URL: 'VALIDATION_FAILED',
  FST_ERR_MAX_PARAM_LENGTH: 'VALIDATION_FAILED',
};

export function toApiError(error: unknown): GymError {
  if (error instanceof GymError) return error;
  const code = (error as { code?: string })?.code;
  const mapped = code === undefined ? undefined : FASTIFY_CODES[code];
  if (mapped !== undefined) return new GymError(mapped, (error as Error).message, { cause: error });
  // Any other request error of fastify's own (a method that needs a content type, ...) is the caller's.
  const status = (error as { statusCode?: unknown })?.statusCode;
  if (code?.startsWith('FST_ERR_') && typeof status === 'number' && status >= 400 && status < 500)
    return new GymError(
      status === 413 ? 'PAYLOAD_TOO_LARGE' : 'VALIDATION_FAILED',
      (error as Error).message,
      {
        cause: error,
      },
    );
  // A body that is not JSON at all arrives as a SyntaxError from the parser.
  if (error instanceof SyntaxError)
    return new GymError('VALIDATION_FAILED', `the body is not valid JSON: ${error.message}`, {
      cause: error,
    });
  return new GymError('INTERNAL', 'internal error', {
    cause: error,
    details: { reason: (error as Error)?.message ?? String(error) },
  });
}
