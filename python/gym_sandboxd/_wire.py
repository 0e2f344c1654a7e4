"""What both transports share: request targets, headers, bodies and the answers' decoding."""

from __future__ import annotations

import io
import json
import os
import uuid
from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass, field
from typing import Any, BinaryIO, Union
from urllib.parse import quote, urlencode

from .discovery import DaemonAddress
from .errors import GymError, ValidationFailedError, error_class, error_from_body

# Sends and reads in 256 KiB pieces: big enough that a 50 MiB file costs few system calls,
# small enough that nothing is held whole.
CHUNK_BYTES = 256 * 1024
# What a request waits for its answer unless it says otherwise: a create waits for readiness and
# may queue behind others, so minutes, not seconds.
DEFAULT_TIMEOUT_S = 600.0
# Added to an exec's own timeout: the daemon answers after killing the command, which takes a moment.
EXEC_TIMEOUT_MARGIN_S = 30.0

Upload = Union[bytes, bytearray, memoryview, str, "os.PathLike[str]", BinaryIO, Iterable[bytes], AsyncIterable[bytes]]
"""A body to upload: bytes, a local path, a binary file object, or an iterable of byte chunks."""


@dataclass
class Body:
    """A request body ready to send: bytes, or a stream with a known length (or none: chunked)."""

    data: bytes | None = None
    stream: BinaryIO | Iterable[bytes] | AsyncIterable[bytes] | None = None
    length: int | None = None
    close_after: BinaryIO | None = None

    @property
    def replayable(self) -> bool:
        return self.stream is None


@dataclass
class Call:
    """One API call, described once for the sync and the async client alike."""

    method: str
    path: str
    query: list[tuple[str, str]] = field(default_factory=list)
    json_body: Any = None
    has_json: bool = False
    body: Body | None = None
    content_type: str | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    # Sent as ``Idempotency-Key`` on every attempt of this call: a retry of a call the daemon may
    # have received gets its first answer and never runs it twice (docs/api.md, "Safe retries").
    idempotency_key: str | None = None

    def target(self) -> str:
        return self.path + (f"?{urlencode(self.query)}" if self.query else "")

    def prepared_body(self) -> Body | None:
        if self.has_json:
            return Body(data=json.dumps(self.json_body, separators=(",", ":")).encode("utf-8"))
        return self.body

    def headers(self, address: DaemonAddress, body: Body | None) -> dict[str, str]:
        headers = {
            "Host": address.url[len("http://") :] if address.url else "localhost",
            "Authorization": f"Bearer {address.token}",
            "Accept": "application/json",
        }
        if self.idempotency_key is not None:
            headers["Idempotency-Key"] = self.idempotency_key
        if self.has_json:
            headers["Content-Type"] = "application/json"
        elif self.content_type is not None:
            headers["Content-Type"] = self.content_type
        if body is not None:
            if body.data is not None:
                headers["Content-Length"] = str(len(body.data))
            elif body.length is not None:
                headers["Content-Length"] = str(body.length)
            else:
                headers["Transfer-Encoding"] = "chunked"
        elif self.method in ("POST", "PUT"):
            headers["Content-Length"] = "0"
        return headers


def idempotency_key(given: str | None) -> str:
    """The caller's key, or a fresh one: each call that changes things carries one."""
    return given if given is not None else uuid.uuid4().hex


def segment(value: str) -> str:
    """One path segment, escaped (an id never changes the route it is put in)."""
    return quote(value, safe="")


def upload_body(source: Upload, size_bytes: int | None = None) -> Body:
    """A :class:`Body` from what a caller gives; a local path is opened here and closed after sending."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        return Body(data=bytes(source))
    if isinstance(source, (str, os.PathLike)):
        handle = open(source, "rb")  # noqa: SIM115 - closed once sent
        return Body(stream=handle, length=os.fstat(handle.fileno()).st_size, close_after=handle)
    if isinstance(source, io.IOBase) or hasattr(source, "read"):
        length = size_bytes
        if length is None:
            try:
                length = os.fstat(source.fileno()).st_size - source.tell()  # type: ignore[union-attr]
            except (OSError, AttributeError, io.UnsupportedOperation):
                length = None
        return Body(stream=source, length=length)  # type: ignore[arg-type]
    return Body(stream=source, length=size_bytes)


def check_answer(status: int, body: bytes) -> None:
    """Raises the daemon's error for a status of 400 or more."""
    if status >= 400:
        raise error_from_body(status, body)


def decode_json(body: bytes) -> Any:
    return None if not body else json.loads(body.decode("utf-8"))


def parse_stream_line(line: bytes) -> dict[str, Any] | None:
    """One NDJSON event, None for a blank line; an ``error`` event becomes the daemon's error."""
    text = line.strip()
    if not text:
        return None
    event = json.loads(text.decode("utf-8"))
    if event.get("type") == "error":
        error = event.get("error") or {}
        code = str(error.get("code", "INTERNAL"))
        raise error_class(code)(str(error.get("message", code)), code=code, details=error.get("details") or {})
    return event


def require(condition: bool, message: str) -> None:
    if not condition:
        raise ValidationFailedError(message)


__all__ = ["Body", "Call", "CHUNK_BYTES", "GymError", "Upload", "segment", "upload_body"]
