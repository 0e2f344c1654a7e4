"""The daemon's errors as Python exceptions.

Every error the daemon answers is ``{"error": {"code", "message", "details"}}`` with a stable
``code``. Each code has its own class here (``SandboxNotFoundError`` for ``SANDBOX_NOT_FOUND``),
all under :class:`GymError`, so callers can catch a kind by class or branch on ``code``. The
codes are checked against the daemon's ``/openapi.json`` by the tests, so a code added there
without a class here fails them.
"""

from __future__ import annotations

from typing import Any

__all__ = ["GymError", "ERROR_STATUS", "error_class", "error_from_body"]


class GymError(Exception):
    """An error of the daemon (or of reaching it), with its stable code.

    ``code`` never changes once published; ``status`` is the HTTP status the daemon answered
    (or the one the code stands for, for client-side errors such as ``DAEMON_UNAVAILABLE``);
    ``details`` is the daemon's structured detail (``issues`` for validation, ``retryAfterMs``
    for capacity, ...).
    """

    code: str = "INTERNAL"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        status: int | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.status = status if status is not None else ERROR_STATUS.get(self.code, 500)
        self.details: dict[str, Any] = dict(details or {})

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status}, message={self.message!r})"


# The HTTP status each code stands for (the daemon's own table, core/errors.ts).
ERROR_STATUS: dict[str, int] = {
    "VALIDATION_FAILED": 400,
    "FORBIDDEN_BY_CONFIG": 403,
    "UNAUTHORIZED": 401,
    "ACCESS_DENIED": 403,
    "SANDBOX_NOT_FOUND": 404,
    "IMAGE_NOT_FOUND": 404,
    "FILE_NOT_FOUND": 404,
    "PROVIDER_NOT_FOUND": 400,
    "PROVIDER_INVALID": 500,
    "SANDBOX_NOT_READY": 409,
    "ARCHIVE_UNSAFE": 400,
    "PATH_KIND_MISMATCH": 400,
    "SANDBOX_START_FAILED": 502,
    "CAPABILITY_UNSUPPORTED": 501,
    "PROVIDER_UNAVAILABLE": 503,
    "PROVIDER_ERROR": 502,
    "PROVIDER_TIMEOUT": 504,
    "POOL_EXHAUSTED": 429,
    "HARNESS_NOT_FOUND": 400,
    "MODEL_UPSTREAM_ERROR": 502,
    "MODEL_RATE_LIMITED": 429,
    "ROLLOUT_NOT_FOUND": 404,
    "ROLLOUT_CONFLICT": 409,
    "GATEWAY_LOOP": 508,
    "POOL_NOT_FOUND": 404,
    "SNAPSHOT_NOT_FOUND": 404,
    "SNAPSHOT_TOO_LARGE": 413,
    "CAPACITY_EXCEEDED": 429,
    "ROUTE_NOT_FOUND": 404,
    "PAYLOAD_TOO_LARGE": 413,
    "FILE_TOO_LARGE": 413,
    "PTY_NOT_FOUND": 404,
    "PTY_HELD": 409,
    "PTY_DETACHED": 409,
    "PTY_LIMIT_REACHED": 429,
    "IDEMPOTENCY_KEY_MISMATCH": 422,
    "IDEMPOTENT_OUTCOME_UNKNOWN": 409,
    "DAEMON_CONFLICT": 409,
    "DAEMON_UNAVAILABLE": 503,
    "SHUTTING_DOWN": 503,
    "SERVICE_UNHEALTHY": 422,
    "INTERNAL": 500,
}


class ValidationFailedError(GymError):
    """The request is invalid; ``details["issues"]`` names the fields."""

    code = "VALIDATION_FAILED"


class ForbiddenByConfigError(GymError):
    """The daemon's configuration does not allow this; ``details["setting"]`` would."""

    code = "FORBIDDEN_BY_CONFIG"


class UnauthorizedError(GymError):
    """No token, a wrong one, the token file cannot be read, or a scoped credential that is no longer valid."""

    code = "UNAUTHORIZED"


class AccessDeniedError(GymError):
    """A scoped credential on a route, right or sandbox it does not grant."""

    code = "ACCESS_DENIED"


class SandboxNotFoundError(GymError):
    """No such sandbox (never created, or destroyed)."""

    code = "SANDBOX_NOT_FOUND"


class ImageNotFoundError(GymError):
    code = "IMAGE_NOT_FOUND"


class FileNotFoundInSandboxError(GymError):
    """A path inside the sandbox does not exist."""

    code = "FILE_NOT_FOUND"


class ProviderNotFoundError(GymError):
    code = "PROVIDER_NOT_FOUND"


class ProviderInvalidError(GymError):
    code = "PROVIDER_INVALID"


class SandboxNotReadyError(GymError):
    code = "SANDBOX_NOT_READY"


class ArchiveUnsafeError(GymError):
    """An archive entry would escape its target; nothing was written."""

    code = "ARCHIVE_UNSAFE"


class PathKindMismatchError(GymError):
    code = "PATH_KIND_MISMATCH"


class SandboxStartFailedError(GymError):
    """The sandbox never became ready; what was made was removed."""

    code = "SANDBOX_START_FAILED"


class CapabilityUnsupportedError(GymError):
    code = "CAPABILITY_UNSUPPORTED"


class ProviderUnavailableError(GymError):
    code = "PROVIDER_UNAVAILABLE"


class ProviderError(GymError):
    code = "PROVIDER_ERROR"


class ProviderTimeoutError(GymError):
    code = "PROVIDER_TIMEOUT"


class PoolExhaustedError(GymError):
    code = "POOL_EXHAUSTED"


class HarnessNotFoundError(GymError):
    code = "HARNESS_NOT_FOUND"


class ModelUpstreamError(GymError):
    code = "MODEL_UPSTREAM_ERROR"


class ModelRateLimitedError(GymError):
    code = "MODEL_RATE_LIMITED"


class RolloutNotFoundError(GymError):
    code = "ROLLOUT_NOT_FOUND"


class RolloutConflictError(GymError):
    """A rollout of that id is open already; its key is never handed out twice."""

    code = "ROLLOUT_CONFLICT"


class GatewayLoopError(GymError):
    code = "GATEWAY_LOOP"


class PoolNotFoundError(GymError):
    code = "POOL_NOT_FOUND"


class SnapshotNotFoundError(GymError):
    code = "SNAPSHOT_NOT_FOUND"


class SnapshotTooLargeError(GymError):
    """The snapshot would pass the daemon's ``snapshots.maxBytes``; nothing of it was kept."""

    code = "SNAPSHOT_TOO_LARGE"


class CapacityExceededError(GymError):
    """Too many sandboxes; ``details["retryAfterMs"]`` says when to try again."""

    code = "CAPACITY_EXCEEDED"


class RouteNotFoundError(GymError):
    code = "ROUTE_NOT_FOUND"


class PayloadTooLargeError(GymError):
    code = "PAYLOAD_TOO_LARGE"


class FileTooLargeError(GymError):
    """A file read back is larger than the reader's ``max_bytes``; reading stopped there."""

    code = "FILE_TOO_LARGE"


class PtyNotFoundError(GymError):
    """No terminal of that id in the sandbox (never opened, closed, or gone with its sandbox)."""

    code = "PTY_NOT_FOUND"


class PtyHeldError(GymError):
    """Another client holds the terminal; attach with ``takeover`` to evict it."""

    code = "PTY_HELD"


class PtyDetachedError(GymError):
    """This attachment was evicted by another client's takeover (or detached)."""

    code = "PTY_DETACHED"


class PtyLimitReachedError(GymError):
    """The sandbox has as many terminals open as the daemon allows; close one."""

    code = "PTY_LIMIT_REACHED"


class IdempotencyKeyMismatchError(GymError):
    """An ``Idempotency-Key`` was sent before with a different request; nothing ran."""

    code = "IDEMPOTENCY_KEY_MISMATCH"


class IdempotentOutcomeUnknownError(GymError):
    """The first request with this key cannot be answered again and is not run again.

    ``details["reason"]`` is ``interrupted`` (the daemon stopped while it ran: it may or may not
    have taken effect) or ``answer-not-kept`` (it ran; its answer was too large to keep).
    """

    code = "IDEMPOTENT_OUTCOME_UNKNOWN"


class DaemonConflictError(GymError):
    code = "DAEMON_CONFLICT"


class DaemonUnavailableError(GymError):
    """The daemon does not answer at its address, or no daemon is running for the state dir."""

    code = "DAEMON_UNAVAILABLE"


class ShuttingDownError(GymError):
    code = "SHUTTING_DOWN"


class ServiceUnhealthyError(GymError):
    """The sandbox's service exited, or its health check kept failing, before it was healthy.

    The task's own fault, not the infrastructure's: a retry gets the same. The sandbox was
    destroyed; ``details`` has the service's exit, its last probe and the tail of its stderr.
    """

    code = "SERVICE_UNHEALTHY"


class InternalError(GymError):
    """Anything the daemon did not anticipate, or an answer that is not the daemon's error shape."""

    code = "INTERNAL"


_CLASSES: dict[str, type[GymError]] = {
    cls.code: cls for cls in GymError.__subclasses__() if cls.code in ERROR_STATUS
}


def error_class(code: str) -> type[GymError]:
    """The exception class of a code; :class:`GymError` itself for a code this version lacks."""
    return _CLASSES.get(code, GymError)


def error_from_body(status: int, body: bytes) -> GymError:
    """The exception for an error response, whatever its body (a proxy's HTML page included)."""
    import json

    try:
        parsed = json.loads(body.decode("utf-8"))
        error = parsed["error"]
        code = str(error["code"])
        message = str(error.get("message", code))
        details = error.get("details") or {}
        if not isinstance(details, dict):
            details = {"details": details}
    except (ValueError, KeyError, TypeError, AttributeError):
        text = body[:500].decode("utf-8", errors="replace")
        return InternalError(f"unexpected HTTP {status} from the daemon: {text}", status=status)
    return error_class(code)(message, code=code, status=status, details=details)


__all__ += [cls.__name__ for cls in _CLASSES.values()]
