"""HTTP/1.1 for the sync client: the standard library's ``http.client``, connections kept alive.

A session exec costs about a millisecond in the daemon, so a new TCP (or unix socket) connection
per call would be most of its cost: connections are pooled and reused. A connection that the
daemon closed while idle fails on its next request before anything was processed; such a
request is sent again once on a new connection when its body can be sent again.
"""

from __future__ import annotations

import http.client
import socket
import threading
from collections.abc import Iterator
from typing import Any

from ._wire import CHUNK_BYTES, Body, Call, check_answer
from .discovery import DaemonAddress
from .errors import DaemonUnavailableError

_STALE_ERRORS = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError)
# Idle connections kept per client: one per thread that calls at once is plenty.
MAX_IDLE_CONNECTIONS = 16


class _TcpConnection(http.client.HTTPConnection):
    def connect(self) -> None:
        super().connect()
        # A request's head and body may leave in two writes: without this, Nagle holds the second
        # until the daemon's delayed ACK (40 ms).
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float | None) -> None:
        super().__init__("localhost", timeout=timeout, blocksize=CHUNK_BYTES)
        self._socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._socket_path)
        self.sock = sock


class SyncResponse:
    """An answer whose body is read as it comes; closing it early drops its connection."""

    def __init__(self, transport: SyncTransport, connection: http.client.HTTPConnection, raw: http.client.HTTPResponse):
        self._transport = transport
        self._connection: http.client.HTTPConnection | None = connection
        self._raw = raw
        self.status = raw.status
        self.headers = raw.headers

    def read(self, size: int = -1) -> bytes:
        data = self._raw.read() if size < 0 else self._raw.read(size)
        if (size < 0 or not data) and self._raw.isclosed():
            self._release()
        return data

    def iter_chunks(self, size: int = CHUNK_BYTES) -> Iterator[bytes]:
        while chunk := self.read(size):
            yield chunk

    def iter_lines(self) -> Iterator[bytes]:
        while line := self._raw.readline():
            yield line
        self._release()

    def _release(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._transport.release(connection, reusable=not self._raw.will_close)

    def close(self) -> None:
        """Releases the connection: reused when the body was read to its end, else closed."""
        if self._connection is None:
            return
        if self._raw.isclosed():
            self._release()
            return
        connection, self._connection = self._connection, None
        self._raw.close()
        connection.close()

    def __enter__(self) -> SyncResponse:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()


class SyncTransport:
    def __init__(self, address: DaemonAddress) -> None:
        self.address = address
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self._closed = False

    def _new_connection(self, timeout_s: float) -> http.client.HTTPConnection:
        if self.address.socket is not None:
            return _UnixConnection(self.address.socket, timeout_s)
        return _TcpConnection(self.address.host or "127.0.0.1", self.address.port, timeout=timeout_s, blocksize=CHUNK_BYTES)

    def _take(self, timeout_s: float) -> tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            if self._idle:
                connection = self._idle.pop()
                if connection.sock is not None:
                    connection.sock.settimeout(timeout_s)
                connection.timeout = timeout_s
                return connection, True
        return self._new_connection(timeout_s), False

    def release(self, connection: http.client.HTTPConnection, *, reusable: bool) -> None:
        with self._lock:
            if reusable and not self._closed and connection.sock is not None and len(self._idle) < MAX_IDLE_CONNECTIONS:
                self._idle.append(connection)
                return
        connection.close()

    def open(self, call: Call) -> SyncResponse:
        """Sends the call; returns once the answer's head arrived (its body not read yet)."""
        body = call.prepared_body()
        headers = call.headers(self.address, body)
        try:
            for attempt in range(2):
                connection, reused = self._take(call.timeout_s)
                try:
                    self._send(connection, call, headers, body)
                    raw = connection.getresponse()
                except _STALE_ERRORS:
                    connection.close()
                    # A reused connection may have been closed while idle; a call with an idempotency
                    # key may go again whatever happened to the first try: the daemon never runs it twice.
                    if (reused or call.idempotency_key is not None) and attempt == 0 and (body is None or body.replayable):
                        continue
                    raise
                except BaseException:
                    connection.close()
                    raise
                return SyncResponse(self, connection, raw)
            raise AssertionError("unreachable")
        except (OSError, http.client.HTTPException) as error:
            if isinstance(error, TimeoutError):
                raise
            raise DaemonUnavailableError(
                f"the daemon does not answer at {self.address.describe()} ({error}); start it with `gym daemon start`"
            ) from error
        finally:
            if body is not None and body.close_after is not None:
                body.close_after.close()

    @staticmethod
    def _send(connection: http.client.HTTPConnection, call: Call, headers: dict[str, str], body: Body | None) -> None:
        connection.putrequest(call.method, call.target(), skip_host=True, skip_accept_encoding=True)
        for name, value in headers.items():
            connection.putheader(name, value)
        if body is None or body.data is not None:
            connection.endheaders(body.data if body is not None else None)
            return
        connection.endheaders()
        stream = body.stream
        chunked = body.length is None
        if hasattr(stream, "read"):
            pieces: Any = iter(lambda: stream.read(CHUNK_BYTES), b"")  # type: ignore[union-attr]
        else:
            pieces = stream
        for piece in pieces:
            if not piece:
                continue
            connection.send(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
        if chunked:
            connection.send(b"0\r\n\r\n")

    def call_bytes(self, call: Call) -> tuple[int, bytes]:
        """Sends the call and reads the whole answer; raises the daemon's error for a failure."""
        with self.open(call) as response:
            data = response.read()
            check_answer(response.status, data)
            return response.status, data

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
