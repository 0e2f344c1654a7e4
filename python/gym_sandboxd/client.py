"""The sync client of the daemon's HTTP API (``GymClient``); see ``aio`` for the async one."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypedDict, cast

from . import _calls as calls
from ._sync_transport import SyncResponse, SyncTransport
from ._ptys import SyncPtyCalls
from ._tar import DEFAULT_MAX_DOWNLOAD_BYTES, TarPipe, download_too_large, extract_stream
from ._wire import Upload, check_answer, decode_json, parse_stream_line
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

__all__ = ["GymClient", "Rollout"]


class Rollout(TypedDict):
    """An open gateway rollout: ``key`` is its agent's API key, ``basePath`` its OpenAI base path."""

    rolloutId: str
    key: str
    basePath: str


class GymClient(SyncPtyCalls):
    """A client of one daemon. Thread-safe; connections are kept alive and reused.

    With no arguments it finds the daemon as the ``gym`` CLI does (``GYM_STATE_DIR``, the
    ``GYM_CONFIG`` file's ``stateDir``, else ``~/.local/state/gym``); ``url=`` or ``socket=``
    (with ``token=``, else the state directory's token) name it directly. ``token=`` (or
    ``GYM_TOKEN``) may be a scoped credential the token holder lent (:meth:`grant_access`): it then
    does its rights on its sandboxes and nothing else. Every method raises the daemon's errors as
    :class:`~gym_sandboxd.errors.GymError` subclasses.
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
        self._transport = SyncTransport(self.address)

    def _json(self, call: calls.Call) -> Any:
        return decode_json(self._transport.call_bytes(call)[1])

    # The daemon.

    def health(self) -> Health:
        return cast(Health, self._json(calls.health()))

    def openapi(self) -> dict[str, Any]:
        """The daemon's OpenAPI document (what ``schema.py`` is generated from)."""
        return cast(dict, self._json(calls.openapi()))

    def metrics(self) -> str:
        return self._transport.call_bytes(calls.metrics())[1].decode("utf-8")

    # Sandboxes.

    def create_sandbox(self, spec: SandboxSpec, *, idempotency_key: str | None = None) -> Sandbox:
        """Creates a sandbox and answers when its readiness probe passed.

        Every call sends an ``Idempotency-Key`` (``idempotency_key``, or a fresh one) and the same
        key on its retries: the daemon never creates twice for one key (docs/api.md, "Safe retries").
        """
        return cast(Sandbox, self._json(calls.create_sandbox(spec, idempotency_key)))

    def acquire(
        self,
        pool: str,
        *,
        env: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        ttl_seconds: int | None = None,
        idempotency_key: str | None = None,
    ) -> Sandbox:
        """Takes a ready sandbox from a pool (``fromPool`` true), or a cold create when none is idle."""
        return cast(Sandbox, self._json(calls.acquire(pool, env, labels, ttl_seconds, idempotency_key)))

    def list_sandboxes(self, *, labels: Mapping[str, str] | None = None, provider: str | None = None) -> list[Sandbox]:
        return cast(list[Sandbox], self._json(calls.list_sandboxes(labels, provider))["sandboxes"])

    def get_sandbox(self, sandbox_id: str) -> Sandbox:
        return cast(Sandbox, self._json(calls.get_sandbox(sandbox_id)))

    def delete_sandbox(self, sandbox_id: str) -> None:
        """Destroys the sandbox; deleting one that is gone is not an error."""
        self._json(calls.delete_sandbox(sandbox_id))

    def inspect_image(self, reference: str, *, provider: str | None = None) -> dict[str, Any]:
        """An image the provider has (``workdir``, ``entrypoint``, ``labels``, ...); ``ImageNotFoundError`` otherwise."""
        return cast(dict, self._json(calls.inspect_image(reference, provider)))

    def get_network(self, sandbox_id: str) -> dict[str, Any]:
        """The sandbox's egress policy (``{"policy": {"mode", "allowedHosts"}, "proxy"}``)."""
        return cast(dict, self._json(calls.get_network(sandbox_id)))

    def set_network(self, sandbox_id: str, mode: str, allowed_hosts: Sequence[str] = ()) -> dict[str, Any]:
        """Sets the sandbox's egress policy now (``none``, ``allowlist`` with hosts, ``public``), within the
        operator's cap (``ForbiddenByConfigError`` beyond it); open connections are cut. Answers the policy and proxy."""
        return cast(dict, self._json(calls.set_network(sandbox_id, mode, allowed_hosts)))

    def keepalive(self, sandbox_id: str, ttl_seconds: int | None = None) -> Sandbox:
        """Renews the lease (for ``ttl_seconds``, default the sandbox's own), never past its deadline."""
        return cast(Sandbox, self._json(calls.keepalive(sandbox_id, ttl_seconds)))

    # Commands.

    def exec(
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
        """Runs ``argv`` (no shell) or ``command`` (``sh -c``); through ``session`` when named.

        A non-zero exit is a result: ``status`` is ``ok``, ``timeout`` (every process of the
        command killed), ``killed``, ``oom`` or ``sandbox_gone``.
        """
        request = calls.exec_request(
            argv, command, session=session, cwd=cwd, env=env, stdin=stdin,
            timeout_ms=timeout_ms, max_output_bytes=max_output_bytes, user=user,
        )  # fmt: skip
        return cast(ExecResult, self._json(calls.exec_call(sandbox_id, request, stream=False, key=idempotency_key)))

    @contextmanager
    def exec_stream(
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
    ) -> Iterator[Iterator[ExecStreamEvent]]:
        """Output events as they come (``stdout``/``stderr``), the ``result`` last.

        Use as ``with client.exec_stream(id, command=...) as events: for event in events: ...``;
        leaving the block before the result cancels the command (the daemon kills it).
        """
        request = calls.exec_request(
            argv, command, session=session, cwd=cwd, env=env, stdin=stdin,
            timeout_ms=timeout_ms, max_output_bytes=max_output_bytes, user=user,
        )  # fmt: skip
        response = self._transport.open(calls.exec_call(sandbox_id, request, stream=True, key=idempotency_key))
        try:
            if response.status >= 400:
                check_answer(response.status, response.read())

            def events() -> Iterator[ExecStreamEvent]:
                for line in response.iter_lines():
                    event = parse_stream_line(line)
                    if event is not None:
                        yield cast(ExecStreamEvent, event)

            yield events()
        finally:
            response.close()

    def stop_processes(self, sandbox_id: str) -> int:
        """Kills every process in the sandbox but its keeper; answers how many."""
        return int(self._json(calls.stop_processes(sandbox_id))["killed"])

    # Files.

    def write_file(self, sandbox_id: str, path: str, source: Upload, *, mode: int | None = None, size_bytes: int | None = None, idempotency_key: str | None = None) -> None:
        """Writes one file (parents created), streamed from bytes, a local path or a file object."""
        self._json(calls.write_file(sandbox_id, path, source, mode, size_bytes, idempotency_key))

    def read_file(self, sandbox_id: str, path: str) -> SyncResponse:
        """The file's bytes as a stream (``read(n)``, ``iter_chunks()``); close it (or use ``with``)."""
        return self._open_download(calls.read_file(sandbox_id, path))

    def download_file(
        self, sandbox_id: str, path: str, target: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES
    ) -> int:
        """Copies one file to a local path, piece by piece; answers the bytes written.

        A file larger than ``max_bytes`` (default 1 GiB, :data:`DEFAULT_MAX_DOWNLOAD_BYTES`) is
        :class:`FileTooLargeError`, and what was written of it is removed: a sparse file costs
        its agent nothing and this host its full apparent size.
        """
        Path(target).parent.mkdir(parents=True, exist_ok=True)
        written = 0
        try:
            with self.read_file(sandbox_id, path) as stream, open(target, "wb") as output:
                for chunk in stream.iter_chunks():
                    written += len(chunk)
                    if written > max_bytes:
                        raise download_too_large(sandbox_id, path, max_bytes)
                    output.write(chunk)
        except FileTooLargeError:
            Path(target).unlink(missing_ok=True)
            raise
        return written

    def read_file_bytes(self, sandbox_id: str, path: str, *, max_bytes: int) -> bytes:
        """The file in memory, at most ``max_bytes`` of it, else :class:`FileTooLargeError`."""
        parts = bytearray()
        with self.read_file(sandbox_id, path) as stream:
            for chunk in stream.iter_chunks():
                parts += chunk
                if len(parts) > max_bytes:
                    raise FileTooLargeError(
                        f"{path} in sandbox {sandbox_id} is larger than {max_bytes} bytes",
                        details={"sandboxId": sandbox_id, "path": path, "maxBytes": max_bytes},
                    )
        return bytes(parts)

    def write_archive(self, sandbox_id: str, directory: str, source: Upload, *, size_bytes: int | None = None, idempotency_key: str | None = None) -> None:
        """Unpacks a tar (bytes, a path, a file object or chunks) into a directory of the sandbox."""
        self._json(calls.write_archive(sandbox_id, directory, source, size_bytes, idempotency_key))

    def read_archive(self, sandbox_id: str, directory: str) -> SyncResponse:
        """A tar of the directory's contents, as a stream."""
        return self._open_download(calls.read_archive(sandbox_id, directory))

    def upload_directory(self, sandbox_id: str, local_directory: str | os.PathLike[str], directory: str) -> None:
        """Copies a local directory's contents into the sandbox as one tar stream made on the fly."""
        tar = TarPipe(local_directory)
        try:
            self.write_archive(sandbox_id, directory, tar.reader)
        finally:
            tar.finish()

    def download_directory(
        self,
        sandbox_id: str,
        directory: str,
        local_directory: str | os.PathLike[str],
        *,
        max_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES,
    ) -> None:
        """Copies a sandbox directory's contents into a local one; entries that would leave it are refused.

        :class:`ArchiveUnsafeError` for an entry that would land outside ``local_directory`` (or a
        link that points outside it); :class:`FileTooLargeError` once the files pass ``max_bytes``
        in all (default 1 GiB). What was unpacked before the refusal stays.
        """
        with self.read_archive(sandbox_id, directory) as stream:
            extract_stream(stream, local_directory, max_bytes=max_bytes)  # type: ignore[arg-type]

    def _open_download(self, call: calls.Call) -> SyncResponse:
        response = self._transport.open(call)
        if response.status >= 400:
            with response:
                check_answer(response.status, response.read())
        return response

    # The model gateway.

    def expose_gateway(self, sandbox_id: str) -> GatewayReach:
        """Makes the gateway reachable from inside the sandbox; ``url`` is its origin as seen there."""
        return cast(GatewayReach, self._json(calls.expose_gateway(sandbox_id)))

    def port_endpoint(self, sandbox_id: str, port: int) -> PortEndpoint:
        """A declared port's proxy ``path`` on the daemon and the ``headers`` (its port key) each request there needs."""
        return cast(PortEndpoint, self._json(calls.port_endpoint(sandbox_id, port)))

    def service_output(self, sandbox_id: str) -> ServiceOutput:
        """The latest output of the sandbox's service (its ``entrypoint``), per stream, with the bytes dropped before it."""
        return cast(ServiceOutput, self._json(calls.service_output(sandbox_id)))

    def open_rollout(
        self, rollout_id: str | None = None, *, upstream: OpenRolloutRequestUpstream | None = None, sandbox_id: str | None = None
    ) -> Rollout:
        """Opens a rollout; its ``key`` is handed out once (opening it again is ``ROLLOUT_CONFLICT``); with ``sandbox_id``, a call from any other sandbox is refused."""
        request: dict[str, Any] = {}
        if rollout_id is not None:
            request["rolloutId"] = rollout_id
        if upstream is not None:
            request["upstream"] = dict(upstream)
        if sandbox_id is not None:
            request["sandboxId"] = sandbox_id
        return cast(Rollout, self._json(calls.open_rollout(request)))  # type: ignore[arg-type]

    def rollout_url(self, rollout: Rollout, reach: GatewayReach | None = None) -> str:
        """The OpenAI base URL of a rollout: inside a sandbox with its ``reach``, else on the daemon's URL."""
        origin = reach["url"] if reach is not None else self.address.url
        if origin is None:
            raise ValueError("the daemon listens on a unix socket: pass the sandbox's reach (expose_gateway)")
        return origin.rstrip("/") + rollout["basePath"]

    def rollout_records(self, rollout_id: str) -> list[dict[str, Any]]:
        return cast(list, self._json(calls.rollout_records(rollout_id))["records"])

    def close_rollout(self, rollout_id: str) -> None:
        self._json(calls.close_rollout(rollout_id))

    # Pools.

    # Scoped access (docs/api.md, "Scoped access").

    def grant_access(self, sandbox_ids: Sequence[str], rights: Sequence[str], *, ttl_seconds: int | None = None) -> AccessGrantCreated:
        """Lends sandboxes: a scoped credential (``["token"]``, shown once) with ``rights`` (``exec``,
        ``files``, ``endpoints``, ``pty``) on them, expiring no later than their leases. Needs the daemon's token.

        Pass the credential as another client's ``token``; it does its rights on those sandboxes and nothing else.
        """
        return cast(AccessGrantCreated, self._json(calls.grant_access(sandbox_ids, rights, ttl_seconds)))

    def list_access(self) -> list[AccessGrant]:
        """The live grants, without their credentials. Needs the daemon's token."""
        return cast(list, (self._json(calls.list_access()))["grants"])

    def revoke_access(self, grant_id: str) -> None:
        """Revokes a grant (idempotent), with the daemon's token or the grant's own credential."""
        self._json(calls.revoke_access(grant_id))

    def define_pool(self, name: str, definition: PoolDefinition) -> PoolStats:
        """Defines (or redefines) a pool; it fills toward ``minIdle`` in the background."""
        return cast(PoolStats, self._json(calls.define_pool(name, definition)))

    def get_pool(self, name: str) -> PoolStats:
        return cast(PoolStats, self._json(calls.get_pool(name)))

    def list_pools(self) -> list[PoolStats]:
        return cast(list[PoolStats], self._json(calls.list_pools())["pools"])

    def delete_pool(self, name: str) -> None:
        """Drains a pool: idle members destroyed, leased ones keep their leases."""
        self._json(calls.delete_pool(name))

    # Snapshots.

    def snapshot(self, sandbox_id: str, image: str) -> str:
        """Commits the sandbox's filesystem to an image; answers the reference later specs name."""
        return str(self._json(calls.snapshot(sandbox_id, image))["image"])

    def create_snapshot(
        self,
        sandbox_id: str,
        *,
        ttl_seconds: int | None = None,
        labels: Mapping[str, str] | None = None,
        live: bool = False,
    ) -> SnapshotInfo:
        """A managed snapshot of the sandbox's files (reaped after its TTL); a spec starts from it by naming its ``image`` (``snapshot:<id>``).

        ``live``: its memory and processes too, where the provider declares ``liveFork``
        (``CAPABILITY_UNSUPPORTED`` elsewhere); every sandbox made from it starts with them running.
        """
        return cast(SnapshotInfo, self._json(calls.create_snapshot(sandbox_id, ttl_seconds, labels, live))["snapshot"])

    def fork(
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
        """``count`` new sandboxes holding the parent's files as of now, each with its own lease (the parent keeps running)."""
        return cast(
            ForkResult,
            self._json(
                calls.fork(
                    sandbox_id,
                    count,
                    labels=labels,
                    env=env,
                    ttl_seconds=ttl_seconds,
                    snapshot_ttl_seconds=snapshot_ttl_seconds,
                    live=live,
                    key=idempotency_key,
                )
            ),
        )

    def list_snapshots(self) -> list[SnapshotInfo]:
        return cast(list[SnapshotInfo], self._json(calls.list_snapshots())["snapshots"])

    def get_snapshot(self, snapshot_id: str) -> SnapshotInfo:
        return cast(SnapshotInfo, self._json(calls.get_snapshot(snapshot_id)))

    def delete_snapshot(self, snapshot_id: str) -> None:
        """Removes a managed snapshot (idempotent); refused while a pool's spec starts from it."""
        self._json(calls.delete_snapshot(snapshot_id))

    def close(self) -> None:
        self._transport.close()

    def __enter__(self) -> GymClient:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()
