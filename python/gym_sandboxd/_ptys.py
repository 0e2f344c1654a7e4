"""Terminal (PTY session) calls of both clients (docs/api.md, "Terminals").

A terminal lives in the daemon: ``create_pty`` opens one (a command run by ``sh -c``, or the
shell) and holds it (``attachment``); another process re-attaches with ``attach_pty`` and replays
its output from any byte offset still held with ``read_pty(since=...)``. Bytes travel base64 on
the wire; these calls take and give ``bytes``.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any, cast

from ._wire import DEFAULT_TIMEOUT_S, Call, segment
from .schema import PtyAttachment, PtyInfo


def _path(sandbox_id: str, pty_id: str | None = None, action: str | None = None) -> str:
    path = f"/v1/sandboxes/{segment(sandbox_id)}/ptys"
    if pty_id is not None:
        path += f"/{segment(pty_id)}"
    if action is not None:
        path += f"/{action}"
    return path


def _with_attachment(body: dict[str, Any], attachment: str | None) -> dict[str, Any]:
    return body if attachment is None else {**body, "attachment": attachment}


def create(
    sandbox_id: str,
    command: str | None,
    cwd: str | None,
    env: Mapping[str, str] | None,
    rows: int,
    cols: int,
    user: str | int | None,
    tty: bool,
) -> Call:
    body: dict[str, Any] = {"rows": rows, "cols": cols, "tty": tty}
    for key, value in (("command", command), ("cwd", cwd), ("env", dict(env) if env else None)):
        if value is not None:
            body[key] = value
    if user is not None:
        body["user"] = str(user)
    return Call("POST", _path(sandbox_id), json_body=body, has_json=True)


def get(sandbox_id: str, pty_id: str, wait_ms: int | None) -> Call:
    query = [] if wait_ms is None else [("waitMs", str(wait_ms))]
    return Call("GET", _path(sandbox_id, pty_id), query=query, timeout_s=DEFAULT_TIMEOUT_S + (wait_ms or 0) / 1000)


def read(
    sandbox_id: str, pty_id: str, since: int | None, wait_ms: int, max_bytes: int | None, stream: str, attachment: str | None
) -> Call:
    query = [("waitMs", str(wait_ms)), ("stream", stream)]
    if since is not None:
        query.append(("since", str(since)))
    if max_bytes is not None:
        query.append(("maxBytes", str(max_bytes)))
    if attachment is not None:
        query.append(("attachment", attachment))
    return Call("GET", _path(sandbox_id, pty_id, "output"), query=query, timeout_s=DEFAULT_TIMEOUT_S + wait_ms / 1000)


def decoded(output: Any) -> dict[str, Any]:
    """A read's answer with ``data`` as bytes."""
    return {**output, "data": base64.b64decode(output["data"])}


class SyncPtyCalls:
    """The terminal calls of :class:`~gym_sandboxd.client.GymClient`."""

    def _json(self, call: Call) -> Any:  # pragma: no cover - the client's own
        raise NotImplementedError

    def create_pty(
        self,
        sandbox_id: str,
        command: str | None = None,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        rows: int = 24,
        cols: int = 80,
        user: str | int | None = None,
        tty: bool = True,
    ) -> PtyAttachment:
        """Opens a terminal (``command`` by ``sh -c``, else the shell); ``["attachment"]`` holds it."""
        return cast(PtyAttachment, self._json(create(sandbox_id, command, cwd, env, rows, cols, user, tty)))

    def list_ptys(self, sandbox_id: str) -> list[PtyInfo]:
        return cast(list, self._json(Call("GET", _path(sandbox_id)))["ptys"])

    def get_pty(self, sandbox_id: str, pty_id: str, *, wait_ms: int | None = None) -> PtyInfo:
        """The terminal; with ``wait_ms``, once it ended or that time passed."""
        return cast(PtyInfo, self._json(get(sandbox_id, pty_id, wait_ms)))

    def attach_pty(self, sandbox_id: str, pty_id: str, *, takeover: bool = True) -> PtyAttachment:
        """Holds the terminal from here; ``takeover`` evicts the holder (else ``PtyHeldError``)."""
        return cast(PtyAttachment, self._json(Call("POST", _path(sandbox_id, pty_id, "attach"), json_body={"takeover": takeover}, has_json=True)))

    def detach_pty(self, sandbox_id: str, pty_id: str, attachment: str) -> None:
        self._json(Call("DELETE", _path(sandbox_id, pty_id, "attach"), query=[("attachment", attachment)]))

    def read_pty(
        self,
        sandbox_id: str,
        pty_id: str,
        *,
        since: int | None = None,
        wait_ms: int = 0,
        max_bytes: int | None = None,
        stream: str = "stdout",
        attachment: str | None = None,
    ) -> dict[str, Any]:
        """Output from absolute offset ``since`` (``data`` as bytes, ``next``, ``dropped``, ``eof``, ``exitCode``)."""
        return decoded(self._json(read(sandbox_id, pty_id, since, wait_ms, max_bytes, stream, attachment)))

    def write_pty(self, sandbox_id: str, pty_id: str, data: bytes, *, attachment: str | None = None) -> None:
        body = _with_attachment({"data": base64.b64encode(data).decode("ascii")}, attachment)
        self._json(Call("POST", _path(sandbox_id, pty_id, "input"), json_body=body, has_json=True))

    def resize_pty(self, sandbox_id: str, pty_id: str, rows: int, cols: int, *, attachment: str | None = None) -> PtyInfo:
        body = _with_attachment({"rows": rows, "cols": cols}, attachment)
        return cast(PtyInfo, self._json(Call("POST", _path(sandbox_id, pty_id, "resize"), json_body=body, has_json=True)))

    def signal_pty(self, sandbox_id: str, pty_id: str, signal: str, *, attachment: str | None = None) -> PtyInfo:
        """Sends ``signal`` (``"SIGINT"``, ``"TERM"``) to every process of the terminal."""
        body = _with_attachment({"signal": signal}, attachment)
        return cast(PtyInfo, self._json(Call("POST", _path(sandbox_id, pty_id, "signal"), json_body=body, has_json=True)))

    def close_pty(self, sandbox_id: str, pty_id: str) -> None:
        """Ends the terminal (every process of it killed). Idempotent."""
        self._json(Call("DELETE", _path(sandbox_id, pty_id)))


class AsyncPtyCalls:
    """The terminal calls of :class:`~gym_sandboxd.aio.AsyncGymClient` (as :class:`SyncPtyCalls`)."""

    async def _json(self, call: Call) -> Any:  # pragma: no cover - the client's own
        raise NotImplementedError

    async def create_pty(
        self,
        sandbox_id: str,
        command: str | None = None,
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        rows: int = 24,
        cols: int = 80,
        user: str | int | None = None,
        tty: bool = True,
    ) -> PtyAttachment:
        return cast(PtyAttachment, await self._json(create(sandbox_id, command, cwd, env, rows, cols, user, tty)))

    async def list_ptys(self, sandbox_id: str) -> list[PtyInfo]:
        return cast(list, (await self._json(Call("GET", _path(sandbox_id))))["ptys"])

    async def get_pty(self, sandbox_id: str, pty_id: str, *, wait_ms: int | None = None) -> PtyInfo:
        return cast(PtyInfo, await self._json(get(sandbox_id, pty_id, wait_ms)))

    async def attach_pty(self, sandbox_id: str, pty_id: str, *, takeover: bool = True) -> PtyAttachment:
        call = Call("POST", _path(sandbox_id, pty_id, "attach"), json_body={"takeover": takeover}, has_json=True)
        return cast(PtyAttachment, await self._json(call))

    async def detach_pty(self, sandbox_id: str, pty_id: str, attachment: str) -> None:
        await self._json(Call("DELETE", _path(sandbox_id, pty_id, "attach"), query=[("attachment", attachment)]))

    async def read_pty(
        self,
        sandbox_id: str,
        pty_id: str,
        *,
        since: int | None = None,
        wait_ms: int = 0,
        max_bytes: int | None = None,
        stream: str = "stdout",
        attachment: str | None = None,
    ) -> dict[str, Any]:
        return decoded(await self._json(read(sandbox_id, pty_id, since, wait_ms, max_bytes, stream, attachment)))

    async def write_pty(self, sandbox_id: str, pty_id: str, data: bytes, *, attachment: str | None = None) -> None:
        body = _with_attachment({"data": base64.b64encode(data).decode("ascii")}, attachment)
        await self._json(Call("POST", _path(sandbox_id, pty_id, "input"), json_body=body, has_json=True))

    async def resize_pty(self, sandbox_id: str, pty_id: str, rows: int, cols: int, *, attachment: str | None = None) -> PtyInfo:
        body = _with_attachment({"rows": rows, "cols": cols}, attachment)
        return cast(PtyInfo, await self._json(Call("POST", _path(sandbox_id, pty_id, "resize"), json_body=body, has_json=True)))

    async def signal_pty(self, sandbox_id: str, pty_id: str, signal: str, *, attachment: str | None = None) -> PtyInfo:
        body = _with_attachment({"signal": signal}, attachment)
        return cast(PtyInfo, await self._json(Call("POST", _path(sandbox_id, pty_id, "signal"), json_body=body, has_json=True)))

    async def close_pty(self, sandbox_id: str, pty_id: str) -> None:
        await self._json(Call("DELETE", _path(sandbox_id, pty_id)))
