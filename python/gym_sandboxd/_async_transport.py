"""HTTP/1.1 for the async client, on asyncio streams (TCP or a unix socket), standard library only.

The standard library has no async HTTP client; a thread per request would cap a training
loop's burst of hundreds of concurrent calls at the thread pool's size. This speaks the small
part of HTTP/1.1 the daemon's API uses: requests with a length or chunked bodies, answers with a
length, chunked or read to the close. Connections are kept alive and reused per event loop
(asyncio streams belong to the loop that opened them).
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator
from typing import Any

from ._wire import CHUNK_BYTES, Body, Call, check_answer
from .discovery import DaemonAddress
from .errors import DaemonUnavailableError, InternalError

MAX_IDLE_CONNECTIONS = 64
# asyncio's default line limit is 64 KiB; a streamed exec event may carry a whole output chunk.
STREAM_LIMIT_BYTES = 4 * 1024 * 1024
_STALE_ERRORS = (ConnectionResetError, BrokenPipeError, ConnectionAbortedError, asyncio.IncompleteReadError)


class _StaleConnection(Exception):
    """The daemon closed a kept-alive connection before answering."""


class _Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    def close(self) -> None:
        self.writer.close()

    @property
    def is_open(self) -> bool:
        return not self.writer.is_closing() and not self.reader.at_eof()


class AsyncResponse:
    """An answer whose body is read as it comes; closing it early drops its connection."""

    def __init__(self, transport: AsyncTransport, connection: _Connection, status: int, headers: dict[str, str], method: str):
        self._transport = transport
        self._connection: _Connection | None = connection
        self.status = status
        self.headers = headers
        self._keep_alive = headers.get("connection", "").lower() != "close"
        encoding = headers.get("transfer-encoding", "").lower()
        self._chunked = "chunked" in encoding
        length = headers.get("content-length")
        if method == "HEAD" or status in (204, 304):
            self._remaining: int | None = 0
        elif self._chunked:
            self._remaining = None
        elif length is not None:
            self._remaining = int(length)
        else:
            self._remaining = None
            self._keep_alive = False
        self._chunk_left = 0
        self._done = self._remaining == 0 and not self._chunked
        self._buffer = bytearray()
        if self._done:
            self._release()

    async def _read_piece(self, size: int) -> bytes:
        """Up to ``size`` bytes of the body, b"" at its end."""
        if self._done:
            return b""
        reader = self._connection.reader  # type: ignore[union-attr]
        if self._chunked:
            if self._chunk_left == 0:
                line = await reader.readline()
                chunk_size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if chunk_size == 0:
                    while (await reader.readline()) not in (b"\r\n", b"\n", b""):
                        pass
                    self._finish()
                    return b""
                self._chunk_left = chunk_size
            data = await reader.read(min(size, self._chunk_left))
            if not data:
                raise InternalError("the daemon closed the connection in the middle of an answer")
            self._chunk_left -= len(data)
            if self._chunk_left == 0:
                await reader.readexactly(2)
            return data
        if self._remaining is None:
            data = await reader.read(size)
            if not data:
                self._finish()
            return data
        data = await reader.read(min(size, self._remaining))
        if not data:
            raise InternalError("the daemon closed the connection in the middle of an answer")
        self._remaining -= len(data)
        if self._remaining == 0:
            self._finish()
        return data

    def _finish(self) -> None:
        self._done = True
        self._release()

    def _release(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            self._transport.release(connection, reusable=self._keep_alive)

    async def read(self) -> bytes:
        parts = bytearray(self._buffer)
        self._buffer.clear()
        while piece := await self._read_piece(CHUNK_BYTES):
            parts += piece
        return bytes(parts)

    async def iter_chunks(self, size: int = CHUNK_BYTES) -> AsyncIterator[bytes]:
        if self._buffer:
            data = bytes(self._buffer)
            self._buffer.clear()
            yield data
        while piece := await self._read_piece(size):
            yield piece

    async def iter_lines(self) -> AsyncIterator[bytes]:
        while True:
            newline = self._buffer.find(b"\n")
            if newline >= 0:
                line = bytes(self._buffer[: newline + 1])
                del self._buffer[: newline + 1]
                yield line
                continue
            piece = await self._read_piece(CHUNK_BYTES)
            if not piece:
                if self._buffer:
                    rest = bytes(self._buffer)
                    self._buffer.clear()
                    yield rest
                return
            self._buffer += piece

    async def aclose(self) -> None:
        """Releases the connection: reused when the body was read to its end, else closed."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    async def __aenter__(self) -> AsyncResponse:
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.aclose()


class AsyncTransport:
    def __init__(self, address: DaemonAddress) -> None:
        self.address = address
        self._idle: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[_Connection]] = weakref.WeakKeyDictionary()

    async def _connect(self) -> _Connection:
        try:
            if self.address.socket is not None:
                reader, writer = await asyncio.open_unix_connection(self.address.socket, limit=STREAM_LIMIT_BYTES)
            else:
                reader, writer = await asyncio.open_connection(self.address.host, self.address.port, limit=STREAM_LIMIT_BYTES)
        except OSError as error:
            raise DaemonUnavailableError(
                f"the daemon does not answer at {self.address.describe()} ({error}); start it with `gym daemon start`"
            ) from error
        return _Connection(reader, writer)

    def _take_idle(self) -> _Connection | None:
        idle = self._idle.get(asyncio.get_running_loop())
        while idle:
            connection = idle.pop()
            if connection.is_open:
                return connection
            connection.close()
        return None

    def release(self, connection: _Connection, *, reusable: bool) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            connection.close()
            return
        idle = self._idle.setdefault(loop, [])
        if reusable and connection.is_open and len(idle) < MAX_IDLE_CONNECTIONS:
            idle.append(connection)
        else:
            connection.close()

    async def open(self, call: Call) -> AsyncResponse:
        """Sends the call; returns once the answer's head arrived (its body not read yet)."""
        body = call.prepared_body()
        headers = call.headers(self.address, body)
        try:
            async with asyncio.timeout(call.timeout_s):
                for attempt in range(2):
                    connection = self._take_idle()
                    reused = connection is not None
                    if connection is None:
                        connection = await self._connect()
                    try:
                        await self._send(connection, call, headers, body)
                        return await self._read_head(connection, call.method)
                    except (_StaleConnection, *_STALE_ERRORS) as error:
                        connection.close()
                        # As the sync transport: a keyed call may go again on a fresh connection too.
                        if (reused or call.idempotency_key is not None) and attempt == 0 and (body is None or body.replayable):
                            continue
                        raise DaemonUnavailableError(
                            f"the daemon closed the connection at {self.address.describe()} before answering"
                        ) from error
                    except BaseException:
                        connection.close()
                        raise
                raise AssertionError("unreachable")
        finally:
            if body is not None and body.close_after is not None:
                body.close_after.close()

    @staticmethod
    async def _send(connection: _Connection, call: Call, headers: dict[str, str], body: Body | None) -> None:
        head = f"{call.method} {call.target()} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        writer = connection.writer
        if body is None or body.data is not None:
            writer.write(head.encode("latin-1") + (body.data if body is not None else b""))
            await writer.drain()
            return
        writer.write(head.encode("latin-1"))
        chunked = body.length is None
        stream: Any = body.stream
        loop = asyncio.get_running_loop()

        async def pieces() -> AsyncIterator[bytes]:
            if hasattr(stream, "read"):
                # A local file: read off the loop, so a slow disk does not stall other requests.
                while piece := await loop.run_in_executor(None, stream.read, CHUNK_BYTES):
                    yield piece
            elif hasattr(stream, "__aiter__"):
                async for piece in stream:
                    yield piece
            else:
                for piece in stream:
                    yield piece

        async for piece in pieces():
            if piece:
                writer.write(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
                await writer.drain()
        if chunked:
            writer.write(b"0\r\n\r\n")
        await writer.drain()

    async def _read_head(self, connection: _Connection, method: str) -> AsyncResponse:
        status_line = await connection.reader.readline()
        if not status_line:
            raise _StaleConnection()
        parts = status_line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise InternalError(f"the daemon answered something that is not HTTP/1.1: {status_line[:100]!r}")
        status = int(parts[1])
        headers: dict[str, str] = {}
        while True:
            line = await connection.reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return AsyncResponse(self, connection, status, headers, method)

    async def call_bytes(self, call: Call) -> tuple[int, bytes]:
        """Sends the call and reads the whole answer; raises the daemon's error for a failure."""
        response = await self.open(call)
        try:
            async with asyncio.timeout(call.timeout_s):
                data = await response.read()
        finally:
            await response.aclose()
        check_answer(response.status, data)
        return response.status, data

    async def aclose(self) -> None:
        for idle in list(self._idle.values()):
            for connection in idle:
                connection.close()
            idle.clear()
