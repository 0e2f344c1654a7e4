/**
 * The provider's edge: every error dockerode or the engine throws becomes a GymError here, so
 * the engine's own HTTP status never reaches our API (fastify would otherwise adopt it).
 */
import { GymError } from '../../core/errors.ts';

interface DockerodeError {
  statusCode?: number;
  reason?: string;
  json?: { message?: string } | null;
  code?: string;
  message?: string;
}

export function engineMessage(error: unknown): string {
  const candidate = error as DockerodeError;
  return candidate?.json?.message ?? candidate?.message ?? String(error);
}

export function engineStatus(error: unknown): number | undefined {
  return (error as DockerodeError)?.statusCode;
}

const UNREACHABLE_CODES = new Set([
  'ECONNREFUSED',
  'ENOENT',
  'EACCES',
  'ECONNRESET',
  'EPIPE',
  'EHOSTUNREACH',
]);

export interface DockerErrorContext {
  operation: string;
  sandboxId?: string;
  image?: string;
}

export function wrapDockerError(error: unknown, context: DockerErrorContext): GymError {
  if (error instanceof GymError) return error;
  const message = engineMessage(error);
  const status = engineStatus(error);
  const code = (error as DockerodeError)?.code;
  const details: Record<string, unknown> = { operation: context.operation, engineMessage: message };
  if (context.sandboxId) details.sandboxId = context.sandboxId;
  if (code !== undefined && UNREACHABLE_CODES.has(code)) {
    return new GymError('PROVIDER_UNAVAILABLE', `the Docker engine cannot be reached (${code}): ${message}`, {
      details,
      cause: error,
    });
  }
  if (code === 'ETIMEDOUT' || code === 'ESOCKETTIMEDOUT') {
    return new GymError(
      'PROVIDER_TIMEOUT',
      `the Docker engine did not answer in time during ${context.operation}`,
      {
        details,
        cause: error,
      },
    );
  }
  if (status === 404 && context.image !== undefined && /image/i.test(message)) {
    return new GymError(
      'IMAGE_NOT_FOUND',
      `image "${context.image}" does not exist on the Docker engine (build it with \`gym image build\`, or pull it where a registry is reachable)`,
      {
        details: { ...details, image: context.image },
        cause: error,
      },
    );
  }
  if (status === 404 && context.sandboxId !== undefined) {
    return new GymError('SANDBOX_NOT_FOUND', `sandbox ${context.sandboxId} does not exist`, {
      details,
      cause: error,
    });
  }
  if (status === 409 && context.sandboxId !== undefined) {
    return new GymError(
      'SANDBOX_NOT_READY',
      `sandbox ${context.sandboxId} cannot ${context.operation} now: ${message}`,
      {
        details,
        cause: error,
      },
    );
  }
  return new GymError('PROVIDER_ERROR', `Docker ${context.operation} failed: ${message}`, {
    details,
    cause: error,
  });
}

/**
 * A failed stop of a sandbox's processes: the engine's refusal as `wrapDockerError` makes it, a
 * failure on the host's side (no status code: the cgroup, the helper) as `PROVIDER_ERROR`.
 */
export function wrapStopError(error: unknown, sandboxId: string): GymError {
  if (error instanceof Error && !('statusCode' in error)) {
    return new GymError(
      'PROVIDER_ERROR',
      `could not stop the processes of sandbox ${sandboxId}: ${error.message}`,
      {
        details: { sandboxId },
        cause: error,
      },
    );
  }
  return wrapDockerError(error, { operation: 'stop processes', sandboxId });
}
