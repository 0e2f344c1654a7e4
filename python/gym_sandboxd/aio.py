"""The async client of the daemon's HTTP API (``AsyncGymClient``): the same calls as ``GymClient``.

Built on asyncio streams with the package's own small HTTP/1.1 client (no third-party package):
thousands of concurrent calls cost no threads, and connections are kept alive per event loop.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, cast

from . import _calls as calls
from ._async_transport import AsyncResponse, AsyncTransport
from ._ptys import AsyncPtyCalls
from ._tar import DEFAULT_MAX_DOWNLOAD_BYTES, TarPipe, download_too_large, extract_stream
from ._wire import Upload, check_answer, decode_json, parse_stream_line
from .client import Rollout
from .discovery import DaemonAddress, find_daemon
from .errors import FileTooLargeError
from .schema import (
    AccessGrant,
    AccessGrantCreated,
    ExecResult,
    ExecStreamEvent,
    ForkResult,
    GatewayReach,
    Health,
    OpenRolloutRequestUpstream,
    PoolDefinition,
    PoolStats,
    PortEndpoint,
    Sandbox,
    SandboxSpec,
    ServiceOutput,
    SnapshotInfo,
)

__all__ = ["AsyncGymClient"]


class AsyncGymClient(AsyncPtyCalls):
    """An async client of one daemon; finds it as :class:`~gym_sandboxd.client.GymClient` does.

    One instance may serve several event loops (each keeps its own connections). Every method
    raises the daemon's errors as :class:`~gym_sandboxd.errors.GymError` subclasses.
    """

    def __init__(
        self,
        *,
        url: str | None = None,
        socket: str | os.PathLike[str] | None = None,
        token: str | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None,
        address: DaemonAddress | None = None,
    ) -> None:
        self.address = address or find_daemon(url=url, socket=socket, token=token, state_dir=state_dir, env=env)
        self._transport = AsyncTransport(self.address)

    async def _json(self, call: calls.Call) -> Any:
        return decode_json((await self._transport.call_bytes(call))[1])

    async def health(self) -> Health:
        return cast(Health, await self._json(calls.health()))

    async def openapi(self) -> dict[str, Any]:
        return cast(dict, await self._json(calls.openapi()))

    async def metrics(self) -> str:
        return (await self._transport.call_bytes(calls.metrics()))[1].decode("utf-8")

    async def create_sandbox(self, spec: SandboxSpec, *, idempotency_key: str | None = None) -> Sandbox:
        """Creates a sandbox and answers when its readiness probe passed.

        Every call sends an ``Idempotency-Key`` (``idempotency_key``, or a fresh one) and the same
        key on its retries: the daemon never creates twice for one key (docs/api.md, "Safe retries").
        """
        return cast(Sandbox, await self._json(calls.create_sandbox(spec, idempotency_key)))

    async def acquire(
        self,
        pool: str,
        *,
        env: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        ttl_seconds: int | None = None,
        idempotency_key: str | None = None,
    ) -> Sandbox:
        """Takes a ready sandbox from a pool (``fromPool`` true), or a cold create when none is idle."""
        return cast(Sandbox, await self._json(calls.acquire(pool, env, labels, ttl_seconds, idempotency_key)))

    async def list_sandboxes(self, *, labels: Mapping[str, str] | None = None, provider: str | None = None) -> list[Sandbox]:
        return cast(list[Sandbox], (await self._json(calls.list_sandboxes(labels, provider)))["sandboxes"])

    async def get_sandbox(self, sandbox_id: str) -> Sandbox:
        return cast(Sandbox, await self._json(calls.get_sandbox(sandbox_id)))

    async def delete_sandbox(self, sandbox_id: str) -> None:
        """Destroys the sandbox; deleting one that is gone is not an error."""
        await self._json(calls.delete_sandbox(sandbox_id))

    async def inspect_image(self, reference: str, *, provider: str | None = None) -> dict[str, Any]:
        """An image the provider has; see ``GymClient.inspect_image``."""
        return cast(dict, await self._json(calls.inspect_image(reference, provider)))

    async def get_network(self, sandbox_id: str) -> dict[str, Any]:
        """The sandbox's egress policy; see ``GymClient.get_network``."""
        return cast(dict, await self._json(calls.get_network(sandbox_id)))

    async def set_network(self, sandbox_id: str, mode: str, allowed_hosts: Sequence[str] = ()) -> dict[str, Any]:
        """Sets the sandbox's egress policy now; see ``GymClient.set_network``."""
        return cast(dict, await self._json(calls.set_network(sandbox_id, mode, allowed_hosts)))

    async def keepalive(self, sandbox_id: str, ttl_seconds: int | None = None) -> Sandbox:
        return cast(Sandbox, await self._json(calls.keepalive(sandbox_id, ttl_seconds)))

    async def exec(
        self,
        sandbox_id: str,
        argv: Sequence[str] | None = None,
        *,
        command: str | None = None,
        session: str | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | bytes | None = None,
        timeout_ms: int | None = None,
        max_output_bytes: int | None = None,
        user: str | None = None,
        idempotency_key: str | None = None,
    ) -> ExecResult:
        """Runs ``argv`` (no shell) or ``command`` (``sh -c``); see ``GymClient.exec``."""
        request = calls.exec_request(
            argv, command, session=session, cwd=cwd, env=env, stdin=stdin,
            timeout_ms=timeout_ms, max_output_bytes=max_output_bytes, user=user,
        )  # fmt: skip
        return cast(ExecResult, await self._json(calls.exec_call(sandbox_id, request, stream=False, key=idempotency_key)))

    @asynccontextmanager
    async def exec_stream(
        self,
        sandbox_id: str,
        argv: Sequence[str] | None = None,
        *,
        command: str | None = None,
        session: str | None = None,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: str | bytes | None = None,
        timeout_ms: int | None = None,
        max_output_bytes: int | None = None,
        user: str | None = None,
        idempotency_key: str | None = None,
    ) -> AsyncIterator[AsyncIterator[ExecStreamEvent]]:
        """``async with client.exec_stream(...) as events: async for event in events``; leaving early cancels it."""
        request = calls.exec_request(
            argv, command, session=session, cwd=cwd, env=env, stdin=stdin,
            timeout_ms=timeout_ms, max_output_bytes=max_output_bytes, user=user,
        )  # fmt: skip
        response = await self._transport.open(calls.exec_call(sandbox_id, request, stream=True, key=idempotency_key))
        try:
            if response.status >= 400:
                check_answer(response.status, await response.read())

            async def events() -> AsyncIterator[ExecStreamEvent]:
                async for line in response.iter_lines():
                    event = parse_stream_line(line)
                    if event is not None:
                        yield cast(ExecStreamEvent, event)

            yield events()
        finally:
            await response.aclose()

    async def stop_processes(self, sandbox_id: str) -> int:
        return int((await self._json(calls.stop_processes(sandbox_id)))["killed"])

    async def write_file(
        self, sandbox_id: str, path: str, source: Upload, *, mode: int | None = None, size_bytes: int | None = None, idempotency_key: str | None = None
    ) -> None:
        """Writes one file (parents created), streamed from bytes, a path, a file object or (async) chunks."""
        await self._json(calls.write_file(sandbox_id, path, source, mode, size_bytes, idempotency_key))

    async def read_file(self, sandbox_id: str, path: str) -> AsyncResponse:
        """The file's bytes as a stream (``iter_chunks()``); close it with ``aclose()`` or ``async with``."""
        return await self._open_download(calls.read_file(sandbox_id, path))

    async def download_file(
        self, sandbox_id: str, path: str, target: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES
    ) -> int:
        """Copies one file to a local path, piece by piece; answers the bytes written.

        Past ``max_bytes`` (default 1 GiB) :class:`FileTooLargeError`, the partial file removed.
        """
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        loop = asyncio.get_running_loop()
        written = 0
        try:
            async with await self.read_file(sandbox_id, path) as stream:
                with open(target, "wb") as output:
                    async for chunk in stream.iter_chunks():
                        written += len(chunk)
                        if written > max_bytes:
                            raise download_too_large(sandbox_id, path, max_bytes)
                        await loop.run_in_executor(None, output.write, chunk)
        except FileTooLargeError:
            Path(target).unlink(missing_ok=True)
            raise
        return written

    async def read_file_bytes(self, sandbox_id: str, path: str, *, max_bytes: int) -> bytes:
        parts = bytearray()
        async with await self.read_file(sandbox_id, path) as stream:
            async for chunk in stream.iter_chunks():
                parts += chunk
                if len(parts) > max_bytes:
                    raise FileTooLargeError(
                        f"{path} in sandbox {sandbox_id} is larger than {max_bytes} bytes",
                        details={"sandboxId": sandbox_id, "path": path, "maxBytes": max_bytes},
                    )
        return bytes(parts)

    async def write_archive(self, sandbox_id: str, directory: str, source: Upload, *, size_bytes: int | None = None, idempotency_key: str | None = None) -> None:
        await self._json(calls.write_archive(sandbox_id, directory, source, size_bytes, idempotency_key))

    async def read_archive(self, sandbox_id: str, directory: str) -> AsyncResponse:
        return await self._open_download(calls.read_archive(sandbox_id, directory))

    async def upload_directory(self, sandbox_id: str, local_directory: str | os.PathLike[str], directory: str) -> None:
        """Copies a local directory's contents into the sandbox as one tar stream made on the fly."""
        tar = TarPipe(local_directory)
        try:
            await self.write_archive(sandbox_id, directory, tar.reader)
        finally:
            await asyncio.get_running_loop().run_in_executor(None, tar.finish)

    async def download_directory(
        self,
        sandbox_id: str,
        directory: str,
        local_directory: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES,
    ) -> None:
        """Copies a sandbox directory's contents into a local one, as the sync client does."""
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        reader, writer = os.fdopen(read_fd, "rb"), os.fdopen(write_fd, "wb")

        def extract() -> None:
            with reader:
                extract_stream(reader, local_directory, max_bytes=max_bytes)

        extracting = loop.run_in_executor(None, extract)
        try:
            async with await self.read_archive(sandbox_id, directory) as stream:
                async for chunk in stream.iter_chunks():
                    await loop.run_in_executor(None, writer.write, chunk)
        except BrokenPipeError:
            pass  # the extraction stopped (it refused an entry); its error is raised below
        finally:
            try:
                writer.close()  # flushes what is buffered: the extraction may have stopped reading
            except BrokenPipeError:
                pass
            await extracting

    async def _open_download(self, call: calls.Call) -> AsyncResponse:
        response = await self._transport.open(call)
        if response.status >= 400:
            async with response:
                check_answer(response.status, await response.read())
        return response

    async def expose_gateway(self, sandbox_id: str) -> GatewayReach:
        return cast(GatewayReach, await self._json(calls.expose_gateway(sandbox_id)))

    async def port_endpoint(self, sandbox_id: str, port: int) -> PortEndpoint:
        """A declared port's proxy ``path`` on the daemon and the ``headers`` (its port key) each request there needs."""
        return cast(PortEndpoint, await self._json(calls.port_endpoint(sandbox_id, port)))

    async def service_output(self, sandbox_id: str) -> ServiceOutput:
        """The latest output of the sandbox's service (its ``entrypoint``), per stream, with the bytes dropped before it."""
        return cast(ServiceOutput, await self._json(calls.service_output(sandbox_id)))

    async def open_rollout(
        self, rollout_id: str | None = None, *, upstream: OpenRolloutRequestUpstream | None = None, sandbox_id: str | None = None
    ) -> Rollout:
        request: dict[str, Any] = {}
        if rollout_id is not None:
            request["rolloutId"] = rollout_id
        if upstream is not None:
            request["upstream"] = dict(upstream)
        if sandbox_id is not None:
            request["sandboxId"] = sandbox_id
        return cast(Rollout, await self._json(calls.open_rollout(request)))  # type: ignore[arg-type]

    def rollout_url(self, rollout: Rollout, reach: GatewayReach | None = None) -> str:
        """The OpenAI base URL of a rollout: inside a sandbox with its ``reach``, else on the daemon's URL."""
        origin = reach["url"] if reach is not None else self.address.url
        if origin is None:
            raise ValueError("the daemon listens on a unix socket: pass the sandbox's reach (expose_gateway)")
        return origin.rstrip("/") + rollout["basePath"]

    async def rollout_records(self, rollout_id: str) -> list[dict[str, Any]]:
        return cast(list, (await self._json(calls.rollout_records(rollout_id)))["records"])

    async def close_rollout(self, rollout_id: str) -> None:
        await self._json(calls.close_rollout(rollout_id))

    # Scoped access (docs/api.md, "Scoped access").

    async def grant_access(self, sandbox_ids: Sequence[str], rights: Sequence[str], *, ttl_seconds: int | None = None) -> AccessGrantCreated:
        """Lends sandboxes: a scoped credential (``["token"]``, shown once) with ``rights`` (``exec``,
        ``files``, ``endpoints``, ``pty``) on them, expiring no later than their leases. Needs the daemon's token.

        Pass the credential as another client's ``token``; it does its rights on those sandboxes and nothing else.
        """
        return cast(AccessGrantCreated, await self._json(calls.grant_access(sandbox_ids, rights, ttl_seconds)))

    async def list_access(self) -> list[AccessGrant]:
        """The live grants, without their credentials. Needs the daemon's token."""
        return cast(list, (await self._json(calls.list_access()))["grants"])

    async def revoke_access(self, grant_id: str) -> None:
        """Revokes a grant (idempotent), with the daemon's token or the grant's own credential."""
        await self._json(calls.revoke_access(grant_id))

    async def define_pool(self, name: str, definition: PoolDefinition) -> PoolStats:
        return cast(PoolStats, await self._json(calls.define_pool(name, definition)))

    async def get_pool(self, name: str) -> PoolStats:
        return cast(PoolStats, await self._json(calls.get_pool(name)))

    async def list_pools(self) -> list[PoolStats]:
        return cast(list[PoolStats], (await self._json(calls.list_pools()))["pools"])

    async def delete_pool(self, name: str) -> None:
        await self._json(calls.delete_pool(name))

    async def snapshot(self, sandbox_id: str, image: str) -> str:
        return str((await self._json(calls.snapshot(sandbox_id, image)))["image"])

    async def create_snapshot(
        self,
        sandbox_id: str,
        *,
        ttl_seconds: int | None = None,
        labels: Mapping[str, str] | None = None,
        live: bool = False,
    ) -> SnapshotInfo:
        answer = await self._json(calls.create_snapshot(sandbox_id, ttl_seconds, labels, live))
        return cast(SnapshotInfo, answer["snapshot"])

    async def fork(
        self,
        sandbox_id: str,
        count: int,
        *,
        labels: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None,
        ttl_seconds: int | None = None,
        snapshot_ttl_seconds: int | None = None,
        live: bool = False,
        idempotency_key: str | None = None,
    ) -> ForkResult:
        call = calls.fork(
            sandbox_id,
            count,
            labels=labels,
            env=env,
            ttl_seconds=ttl_seconds,
            snapshot_ttl_seconds=snapshot_ttl_seconds,
            live=live,
            key=idempotency_key,
        )
        return cast(ForkResult, await self._json(call))

    async def list_snapshots(self) -> list[SnapshotInfo]:
        return cast(list[SnapshotInfo], (await self._json(calls.list_snapshots()))["snapshots"])

    async def get_snapshot(self, snapshot_id: str) -> SnapshotInfo:
        return cast(SnapshotInfo, await self._json(calls.get_snapshot(snapshot_id)))

    async def delete_snapshot(self, snapshot_id: str) -> None:
        await self._json(calls.delete_snapshot(snapshot_id))

    async def aclose(self) -> None:
        await self._transport.aclose()

    async def __aenter__(self) -> AsyncGymClient:
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.aclose()
