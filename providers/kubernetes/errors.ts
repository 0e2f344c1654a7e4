/**
 * The Kubernetes API's refusals as our errors, at the provider's edge: the client's
 * `ApiException` carries an HTTP code that must never become the daemon's own status (see
 * STYLE.md on fastify), so every call's failure is wrapped here into a typed `GymError`.
 */
import { ApiException } from '@kubernetes/client-node';
import { GymError } from '../../core/errors.ts';

/** What a refused API call said: its HTTP code and the Status message. */
export function apiFailure(error: unknown): { code: number | null; message: string } {
  if (error instanceof ApiException) {
    let message = String(error.message);
    const body = error.body as unknown;
    try {
      const status = (typeof body === 'string' ? JSON.parse(body) : body) as { message?: string };
      if (typeof status?.message === 'string') message = status.message;
    } catch {
      // not JSON: keep the exception's own message
    }
    return { code: error.code, message };
  }
  return { code: null, message: (error as Error)?.message ?? String(error) };
}

/**
 * `what` names the call (`Pod read`, `NetworkPolicy create`, ...); with `sandboxId`, a 404 is
 * `SANDBOX_NOT_FOUND`. No answer at all is `PROVIDER_UNAVAILABLE`, a refused request
 * `VALIDATION_FAILED`, any other failure `PROVIDER_ERROR`.
 */
export function wrapApiError(error: unknown, what: string, sandboxId?: string): GymError {
  if (error instanceof GymError) return error;
  const { code, message } = apiFailure(error);
  const details = { ...(sandboxId === undefined ? {} : { sandboxId }), httpStatus: code };
  if (code === null) {
    return new GymError(
      'PROVIDER_UNAVAILABLE',
      `the Kubernetes API server cannot be reached (${what}): ${message}`,
      {
        details,
        cause: error,
      },
    );
  }
  if (code === 404 && sandboxId !== undefined) {
    return new GymError('SANDBOX_NOT_FOUND', `sandbox ${sandboxId} does not exist`, { details });
  }
  if (code === 400 || code === 422) {
    return new GymError('VALIDATION_FAILED', `the API server refused the ${what}: ${message}`, {
      details,
      cause: error,
    });
  }
  return new GymError('PROVIDER_ERROR', `the API server failed the ${what} (HTTP ${code}): ${message}`, {
    details,
    cause: error,
  });
}
