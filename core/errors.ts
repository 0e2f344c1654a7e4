/**
 * Typed errors with stable codes. One table, one base class: every error that crosses a module
 * boundary is a {@link GymError} whose `code` never changes once published, so clients can
 * branch on it and the HTTP layer can map it without guessing.
 */

export const ERROR_CODES = {
  /** Input failed schema validation; `details.issues` names the fields. */
  VALIDATION_FAILED: { httpStatus: 400, summary: 'the request is invalid' },
  /**
   * The request asks for something that reaches the host (a bind mount, a capability, a network
   * mode, an image tag) that the operator's configuration does not allow; `details.setting` names
   * the setting that would allow it.
   */
  FORBIDDEN_BY_CONFIG: { httpStatus: 403, summary: 'the daemon configuration does not allow this' },
  /** No or wrong bearer token. */
  UNAUTHORIZED: { httpStatus: 401, summary: 'authentication required' },
  /**
   * A scoped credential (docs/api.md, "Scoped access") was presented to a route it does not grant:
   * another sandbox, a right it lacks, or a route no scoped credential may call.
   */
  ACCESS_DENIED: { httpStatus: 403, summary: 'the scoped credential does not grant this' },
  /** The sandbox id is unknown to the provider (never created, or already destroyed). */
  SANDBOX_NOT_FOUND: { httpStatus: 404, summary: 'no such sandbox' },
  /** The image named in a spec does not exist where the provider looks for it. */
  IMAGE_NOT_FOUND: { httpStatus: 404, summary: 'no such image' },
  /** A path inside a sandbox does not exist (file or archive download). */
  FILE_NOT_FOUND: { httpStatus: 404, summary: 'no such file in the sandbox' },
  /** The provider name is not registered and is not a loadable module. */
  PROVIDER_NOT_FOUND: { httpStatus: 400, summary: 'no such provider' },
  /** A third-party provider module exists but does not export a usable factory. */
  PROVIDER_INVALID: { httpStatus: 500, summary: 'the provider module is not a valid provider' },
  /** The sandbox exists but is not in a state that allows the operation (stopped, being destroyed). */
  SANDBOX_NOT_READY: { httpStatus: 409, summary: 'the sandbox is not ready' },
  /** An uploaded archive has an entry that escapes its target directory or a forbidden type. */
  ARCHIVE_UNSAFE: { httpStatus: 400, summary: 'the archive would write outside its target' },
  /** The path names a directory where a file was expected, or the reverse. */
  PATH_KIND_MISMATCH: { httpStatus: 400, summary: 'the path is not of the expected kind' },
  /** The sandbox came up but its readiness probe never passed; everything created was removed. */
  SANDBOX_START_FAILED: { httpStatus: 502, summary: 'the sandbox failed to start' },
  /** The provider cannot do what the spec or call asks (snapshot, gpus, disk limits, ...). */
  CAPABILITY_UNSUPPORTED: { httpStatus: 501, summary: 'the provider does not support this' },
  /** The backend (Docker engine, API server, SSH host) cannot be reached. */
  PROVIDER_UNAVAILABLE: { httpStatus: 503, summary: 'the provider is unavailable' },
  /** The backend answered with an error we have no more specific code for. */
  PROVIDER_ERROR: { httpStatus: 502, summary: 'the provider failed' },
  /** The backend did not answer in time. */
  PROVIDER_TIMEOUT: { httpStatus: 504, summary: 'the provider timed out' },
  /** A pool has no capacity left and its queue is full. */
  POOL_EXHAUSTED: { httpStatus: 429, summary: 'no capacity left' },
  /** The harness name is not registered and is not a loadable module. */
  HARNESS_NOT_FOUND: { httpStatus: 400, summary: 'no such harness' },
  /** The model upstream (policy server) failed or could not be reached, after bounded retries. */
  MODEL_UPSTREAM_ERROR: { httpStatus: 502, summary: 'the model upstream failed' },
  /** The model upstream kept answering 429 through every retry. */
  MODEL_RATE_LIMITED: { httpStatus: 429, summary: 'the model upstream is rate limiting' },
  /** No gateway rollout of that id (never opened, or closed). */
  ROLLOUT_NOT_FOUND: { httpStatus: 404, summary: 'no such rollout' },
  /** A rollout of that id is already open; its key is never handed out twice. */
  ROLLOUT_CONFLICT: { httpStatus: 409, summary: 'the rollout is already open' },
  /** A model call came back to the gateway that sent it (its upstream leads to itself). */
  GATEWAY_LOOP: { httpStatus: 508, summary: 'the model call loops back to this gateway' },
  /** No pool of that name is defined. */
  POOL_NOT_FOUND: { httpStatus: 404, summary: 'no such pool' },
  /** No managed snapshot of that id (never made, removed, or expired). */
  SNAPSHOT_NOT_FOUND: { httpStatus: 404, summary: 'no such snapshot' },
  /** A snapshot would be larger than the configured `snapshots.maxBytes`; nothing of it is kept. */
  SNAPSHOT_TOO_LARGE: { httpStatus: 413, summary: 'the snapshot is larger than the configured limit' },
  /** The provider's limit on live sandboxes or concurrent creates is reached and its wait queue is full; `details.retryAfterMs` hints when to retry. */
  CAPACITY_EXCEEDED: { httpStatus: 429, summary: 'too many sandboxes; retry later' },
  /** No API route matches the method and path. */
  ROUTE_NOT_FOUND: { httpStatus: 404, summary: 'no such route' },
  /** The request body is larger than the server accepts. */
  PAYLOAD_TOO_LARGE: { httpStatus: 413, summary: 'the request body is too large' },
  /** A file read back from a sandbox is larger than the reader's byte limit (`details.maxBytes`); reading stopped there. */
  FILE_TOO_LARGE: { httpStatus: 413, summary: 'the file is larger than the reader accepts' },
  /** No terminal of that id in the sandbox (never opened, closed, or gone with its sandbox). */
  PTY_NOT_FOUND: { httpStatus: 404, summary: 'no such terminal' },
  /** Another client holds the terminal; attach with `takeover` to evict it. */
  PTY_HELD: { httpStatus: 409, summary: 'another client holds the terminal' },
  /** The attachment named was evicted by another client's takeover (or detached); attach again. */
  PTY_DETACHED: { httpStatus: 409, summary: 'the terminal was taken over by another client' },
  /** The sandbox has as many terminals open as the daemon allows (`details.maxPerSandbox`); close one. */
  PTY_LIMIT_REACHED: { httpStatus: 429, summary: 'too many terminals in the sandbox' },
  /**
   * An `Idempotency-Key` was sent before with another request (route, sandbox, query or body);
   * nothing ran. A new request needs a new key (docs/api.md, "Safe retries").
   */
  IDEMPOTENCY_KEY_MISMATCH: {
    httpStatus: 422,
    summary: 'the idempotency key was used for a different request',
  },
  /**
   * The request first sent with this `Idempotency-Key` cannot be answered again and is not run
   * again: the daemon stopped while it ran (`details.reason: interrupted`), or its answer was too
   * large to keep (`answer-not-kept`).
   */
  IDEMPOTENT_OUTCOME_UNKNOWN: {
    httpStatus: 409,
    summary: 'the first request with this idempotency key has no answer to give again',
  },
  /** Another daemon holds the state directory, or the listen address is taken. */
  DAEMON_CONFLICT: { httpStatus: 409, summary: 'another daemon is in the way' },
  /** Client side: the daemon does not answer at its address (not started, or stopped). */
  DAEMON_UNAVAILABLE: { httpStatus: 503, summary: 'the daemon cannot be reached' },
  /** The daemon is shutting down and takes no new work. */
  SHUTTING_DOWN: { httpStatus: 503, summary: 'the daemon is shutting down' },
  /**
   * The sandbox's service (its `entrypoint`) exited, or its health check failed `retries` times,
   * before it was healthy: the task's own fault, not the infrastructure's (a retry gets the same).
   * The sandbox was destroyed; `details` has the service's exit, its last probe and its output's tail.
   */
  SERVICE_UNHEALTHY: { httpStatus: 422, summary: "the sandbox's service never became healthy" },
  /** Anything we did not anticipate. A bug: please report it. */
  INTERNAL: { httpStatus: 500, summary: 'internal error' },
} as const satisfies Record<string, { httpStatus: number; summary: string }>;

export type ErrorCode = keyof typeof ERROR_CODES;

export interface GymErrorOptions {
  details?: Record<string, unknown>;
  cause?: unknown;
}

export class GymError extends Error {
  readonly code: ErrorCode;
  readonly httpStatus: number;
  readonly details: Record<string, unknown>;

  constructor(code: ErrorCode, message: string, options: GymErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.name = 'GymError';
    this.code = code;
    this.httpStatus = ERROR_CODES[code].httpStatus;
    this.details = options.details ?? {};
  }

  /** The wire form used by the HTTP API: `{"error": {"code", "message", "details"}}`. */
  toJSON(): { error: { code: ErrorCode; message: string; details: Record<string, unknown> } } {
    return { error: { code: this.code, message: this.message, details: this.details } };
  }
}

export function isGymError(value: unknown, code?: ErrorCode): value is GymError {
  return value instanceof GymError && (code === undefined || value.code === code);
}

/** Wraps anything thrown into a GymError, keeping GymErrors as they are. */
export function toGymError(error: unknown, fallback: ErrorCode = 'INTERNAL'): GymError {
  if (error instanceof GymError) return error;
  const message = error instanceof Error ? error.message : String(error);
  return new GymError(fallback, message, { cause: error });
}
