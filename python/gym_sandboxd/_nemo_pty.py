"""NeMo Gym's PTY sessions (``SupportsSandboxPty``, ``SupportsSandboxPtyAttach``) on the daemon's terminals.

A session is the daemon's terminal (docs/api.md, "Terminals"): it lives in the daemon, so another
process re-attaches by ``session_id`` and replays from a byte offset. Reads are long polls of the
daemon's output window from this session's own offset; a takeover by another client makes this
one's next call fail with ``SandboxPtyError``, as NeMo Gym's protocol asks.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from .aio import AsyncGymClient
from .errors import GymError, PtyDetachedError, PtyNotFoundError, SandboxNotFoundError, SandboxNotReadyError

try:
    from nemo_gym.sandbox.providers.base import SandboxPtyError  # type: ignore[import-not-found]
except ImportError:

    class SandboxPtyError(RuntimeError):  # type: ignore[no-redef]
        """A PTY session failed outside its process's normal exit."""


# One long poll at most this long: a read with no timeout polls again and again.
_POLL_MS = 30_000


def _remaining_ms(deadline: float | None) -> int:
    if deadline is None:
        return _POLL_MS
    return max(0, min(_POLL_MS, int((deadline - time.monotonic()) * 1000)))


class GymSandboxdPtySession:
    """One terminal, as NeMo Gym's ``SandboxPtySession``; an async context manager (exit closes it)."""

    def __init__(self, client: AsyncGymClient, sandbox_id: str, attached: dict[str, Any], *, owned: bool, since: int | None = None) -> None:
        pty = attached["pty"]
        self._client = client
        self._sandbox_id = sandbox_id
        self._attachment: str | None = attached["attachment"]
        self._owned = owned
        self._closed = False
        self.session_id: str = pty["id"]
        self.mode: str | None = "pty" if pty["tty"] else "pipe"
        # Where this session reads next: a new one from the start, an attach from `since` (absent:
        # what comes from now on, as a client that takes over a live terminal expects).
        self._next = {"stdout": since if since is not None else (0 if owned else pty["output"]["end"]), "stderr": 0 if since is None else since}

    @property
    def closed(self) -> bool:
        return self._closed

    async def _call(self, call: Any) -> Any:
        if self._closed:
            raise SandboxPtyError(f"PTY session {self.session_id} is closed")
        try:
            return await call
        except PtyDetachedError as error:
            raise SandboxPtyError(f"PTY session {self.session_id} was taken over by another client") from error
        except (PtyNotFoundError, SandboxNotFoundError) as error:
            raise SandboxPtyError(f"PTY session {self.session_id} is gone: {error}") from error

    async def _read(self, stream: str, timeout_s: float | None) -> bytes:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            output = await self._call(
                self._client.read_pty(
                    self._sandbox_id,
                    self.session_id,
                    since=self._next[stream],
                    wait_ms=_remaining_ms(deadline),
                    stream=stream,
                    attachment=self._attachment,
                )
            )
            self._next[stream] = output["next"]
            if output["data"]:
                return output["data"]
            if output["eof"]:
                if output["state"] == "lost":
                    raise SandboxPtyError(f"PTY session {self.session_id} died without exiting")
                return b""
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"no output from PTY session {self.session_id} within {timeout_s}s")

    async def read(self, *, timeout_s: float | None = None) -> bytes:
        """The next output chunk (all terminal output in PTY mode); ``b""`` once exited and drained."""
        return await self._read("stdout", timeout_s)

    async def read_stderr(self, *, timeout_s: float | None = None) -> bytes:
        """The next stderr chunk (pipe mode); in PTY mode ``b""`` once the process exited."""
        if self.mode == "pty":
            await self.wait_exit(timeout_s=timeout_s)
            return b""
        return await self._read("stderr", timeout_s)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while chunk := await self.read():
            yield chunk

    async def write(self, data: bytes) -> None:
        try:
            await self._call(self._client.write_pty(self._sandbox_id, self.session_id, bytes(data), attachment=self._attachment))
        except SandboxNotReadyError as error:
            raise SandboxPtyError(f"PTY session {self.session_id} has ended") from error

    async def resize(self, rows: int, cols: int) -> None:
        await self._call(self._client.resize_pty(self._sandbox_id, self.session_id, rows, cols, attachment=self._attachment))

    async def send_signal(self, signal: str) -> None:
        """Delivers ``signal`` (``"SIGINT"``) to every process of the session."""
        try:
            await self._call(self._client.signal_pty(self._sandbox_id, self.session_id, signal, attachment=self._attachment))
        except SandboxNotReadyError:
            pass  # it ended already: nothing to deliver to

    async def wait_exit(self, *, timeout_s: float | None = None) -> int:
        """The exit code, once the process exited."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        while True:
            pty = await self._call(self._client.get_pty(self._sandbox_id, self.session_id, wait_ms=_remaining_ms(deadline)))
            if pty["state"] == "exited" and pty["exitCode"] is not None:
                return int(pty["exitCode"])
            if pty["state"] != "running":
                raise SandboxPtyError(f"PTY session {self.session_id} died without an exit code: {pty.get('reason', pty['state'])}")
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"PTY session {self.session_id} did not exit within {timeout_s}s")

    async def run_detached(self, command: str, *, poll_interval_s: float = 15.0) -> tuple[bytes, int | None]:
        """Runs ``command`` in this session's shell, polling for its end; ``(merged output, exit code)``.

        Nothing holds a connection between polls (each poll is one long read of the daemon's
        window). Output that left the window (1 MiB) between polls raises rather than returning
        a truncated record.
        """
        token = f"GYMPTY{uuid.uuid4().hex[:12]}"
        # The markers are split in two printf arguments, so the terminal's echo never holds them.
        await self.write(
            f"{{ printf '%s%s\\n' '{token[:6]}' '{token[6:]}S'\n{command}\nprintf '%s%s:%s\\n' '{token[:6]}' '{token[6:]}' \"$?\"\n}} </dev/null\n".encode()
        )
        needle = f"{token}:".encode()
        buffer = bytearray()
        while True:
            output = await self._call(
                self._client.read_pty(
                    self._sandbox_id, self.session_id, since=self._next["stdout"], wait_ms=max(1, int(poll_interval_s * 1000)), attachment=self._attachment
                )
            )
            if output["dropped"]:
                raise SandboxPtyError(f"the command printed more than the daemon keeps between polls ({output['dropped']} bytes lost)")
            self._next["stdout"] = output["next"]
            buffer.extend(output["data"])
            marker = buffer.find(needle)
            if marker >= 0 and b"\n" in buffer[marker:]:
                break
            if output["eof"]:
                return bytes(buffer), None
        before, _, trailing = bytes(buffer).partition(needle)
        _, seen, after = before.partition(f"{token}S".encode())
        text = after.partition(b"\n")[2] if seen else before
        exit_text = trailing.split(b"\n", 1)[0].strip()
        return text, int(exit_text) if exit_text.isdigit() else None

    async def reattach(self) -> None:
        """Nothing to do: no connection is held between calls."""

    async def close(self) -> None:
        """Idempotent: ends a session this client created; an attached one is only let go of."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._owned:
                await self._client.close_pty(self._sandbox_id, self.session_id)
            elif self._attachment is not None:
                await self._client.detach_pty(self._sandbox_id, self.session_id, self._attachment)
        except GymError:
            pass  # the sandbox or the session is gone already: nothing left to end

    async def __aenter__(self) -> GymSandboxdPtySession:
        return self

    async def __aexit__(self, exc_type: Any, exc_val: Any, exc_tb: Any) -> None:
        await self.close()


async def create_session(client: AsyncGymClient, sandbox_id: str, spec: Any, workdir: str | None) -> GymSandboxdPtySession:
    """A new terminal for NeMo Gym's ``SandboxPtySpec``."""
    cwd = spec.cwd if spec.cwd is not None else workdir
    attached = await client.create_pty(
        sandbox_id,
        spec.command,
        cwd=cwd,
        env=spec.env,
        rows=spec.rows,
        cols=spec.cols,
        user=spec.user,
        tty=spec.pty,
    )
    return GymSandboxdPtySession(client, sandbox_id, dict(attached), owned=True)


async def attach_session(
    client: AsyncGymClient, sandbox_id: str, session_id: str, *, takeover: bool, since: int | None
) -> GymSandboxdPtySession:
    """Another process's hold on a terminal opened elsewhere (``since``: replay from that byte offset)."""
    try:
        attached = await client.attach_pty(sandbox_id, session_id, takeover=takeover)
    except GymError as error:
        raise SandboxPtyError(f"cannot attach PTY session {session_id}: {error}") from error
    return GymSandboxdPtySession(client, sandbox_id, dict(attached), owned=False, since=since)


__all__ = ["GymSandboxdPtySession", "SandboxPtyError", "attach_session", "create_session"]

