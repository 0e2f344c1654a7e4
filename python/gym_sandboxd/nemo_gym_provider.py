"""A NeMo Gym sandbox provider backed by the gym-sandboxd daemon.

NeMo Gym finds it through the entry point ``gym_sandboxd`` of the group
``nemo_gym.sandbox_providers``; its constructor takes the provider's mapping of a named
``sandbox:`` block (see ``python/README.md``). It implements NeMo Gym's ``SandboxProvider``
protocol and ``ConnectableProvider`` (a handle is the daemon's sandbox id, so any process with
the same configuration rebuilds it; ``serialize_handle(scope="operate")`` lends it with a scoped
credential instead, for a process that holds no token). ``SandboxSpec.ports`` are the daemon's
declared ports and :meth:`GymSandboxdProvider.endpoint` their URL on the daemon with the sandbox's
port key as a header (the port is reached through the daemon's relay, so a sandbox without network
keeps none); ``SandboxSpec.entrypoint`` runs as the daemon's supervised service beside its keeper.
It declares PTY sessions and their re-attach (``SupportsSandboxPty``, ``SupportsSandboxPtyAttach``:
the daemon's terminals, which live in the daemon and replay from a byte offset). What it adds is
:meth:`GymSandboxdProvider.model_endpoint`: the model gateway as an agent inside the sandbox
reaches it, with its rollout's key.
"""

from __future__ import annotations

import asyncio
import math
import os
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._nemo_types import (
    SandboxEndpoint,
    SandboxExecResult,
    SandboxHandle,
    SandboxSpec,
    SandboxStatus,
)
from ._nemo_access import borrowed_client, operate_access, release
from ._nemo_pty import GymSandboxdPtySession
from ._nemo_pty import attach_session as attach_pty_session
from ._nemo_pty import create_session as create_pty_session
from ._nemo_spec import (
    SANDBOX_LABEL,
    GymSandboxdCreateError,
    GymSandboxdCreateVerificationError,
    SandboxFileError,
    _absolute,
    _labels,
)
from ._tar import DEFAULT_MAX_DOWNLOAD_BYTES
from .aio import AsyncGymClient
from .discovery import find_daemon
from .errors import (
    DaemonUnavailableError,
    GymError,
    ProviderTimeoutError,
    ProviderUnavailableError,
    SandboxNotFoundError,
    SandboxNotReadyError,
    SandboxStartFailedError,
    ShuttingDownError,
    UnauthorizedError,
)
from ._nemo_results import SANDBOX_RUNTIME_RETURN_CODE, _exec_result

__all__ = [
    "GymSandboxdProvider",
    "GymSandboxdCreateError",
    "GymSandboxdCreateVerificationError",
    "SandboxFileError",
    "SANDBOX_RUNTIME_RETURN_CODE",
]

PROVIDER_NAME = "gym_sandboxd"
# NeMo Gym's own default for a command without a timeout.
DEFAULT_EXEC_TIMEOUT_S = 180.0
# Commands of one sandbox run through persistent sessions (a millisecond instead of a fresh exec's
# tens); one per concurrent command, up to this many, then fresh execs.
MAX_SESSIONS_PER_SANDBOX = 8
# Errors that mean the command could not run at all: the sandbox, its backend or the daemon is
# gone or does not answer. NeMo Gym's Docker provider reports the same (no such container, the
# engine unreachable) as error_type "sandbox".
_SANDBOX_UNREACHABLE = (
    SandboxNotFoundError,
    SandboxNotReadyError,
    DaemonUnavailableError,
    ProviderUnavailableError,
    ProviderTimeoutError,
    ShuttingDownError,
)
_PROVIDER_OPTION_KEYS = frozenset({"provider", "pool", "network", "user", "readiness_command", "pids_limit", "options"})


@dataclass
class _SandboxState:
    """What the provider keeps in ``SandboxHandle.raw`` (provider-owned; callers pass it back)."""

    sandbox_id: str
    shell: str
    workdir: str | None
    idle_sessions: list[str] = field(default_factory=list)
    sessions_made: int = 0
    # A borrowed handle (``connect`` with a scoped credential): the client holding that credential
    # and its grant's id; None for a handle this provider's own token made or reconnected.
    client: AsyncGymClient | None = None
    grant_id: str | None = None

    def take_session(self) -> str | None:
        if self.idle_sessions:
            return self.idle_sessions.pop()
        if self.sessions_made >= MAX_SESSIONS_PER_SANDBOX:
            return None
        self.sessions_made += 1
        return f"nemo-{self.sessions_made}"


class GymSandboxdProvider:
    """NeMo Gym's ``SandboxProvider`` on the gym-sandboxd daemon.

    Configuration (the provider's mapping of a ``sandbox:`` block; all optional):

    - ``url`` / ``socket`` / ``token`` / ``state_dir``: where the daemon is (default: as the
      ``gym`` CLI finds it: ``GYM_STATE_DIR``, else ``~/.local/state/gym``).
    - ``provider``, ``pool``, ``network``: defaults for every sandbox (the daemon's backend, a warm
      pool to acquire from, ``none``/``bridge``/``host``); ``provider_options`` override them.
    - ``default_timeout_s`` (180): a command's timeout when the caller gives none.
    - ``max_output_bytes``: per stream (default the daemon's 1 MiB; beyond it head and tail are kept).
    - ``exec_shell``: the shell commands run in (default ``bash`` when the image has it, else ``sh``).
    - ``ttl_s``: the lease when a spec gives none (default the daemon's, one hour).
    - ``max_download_bytes`` (1 GiB): the most one ``download`` writes here; a larger file fails
      (a sparse file is small in the sandbox and its full apparent size on this host).
    - ``default_metadata`` is NeMo Gym's own reserved key and never reaches the provider.
    """

    name = PROVIDER_NAME

    def __init__(
        self,
        *,
        url: str | None = None,
        socket: str | None = None,
        token: str | None = None,
        state_dir: str | None = None,
        provider: str | None = None,
        pool: str | None = None,
        network: str | None = None,
        default_timeout_s: float = DEFAULT_EXEC_TIMEOUT_S,
        max_output_bytes: int | None = None,
        exec_shell: str | None = None,
        ttl_s: float | None = None,
        max_download_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES,
    ) -> None:
        if default_timeout_s <= 0:
            raise ValueError("default_timeout_s must be > 0")
        if max_download_bytes <= 0:
            raise ValueError("max_download_bytes must be > 0")
        try:
            self._client = AsyncGymClient(url=url, socket=socket, token=token, state_dir=state_dir)
        except UnauthorizedError:
            # A process that only borrows sandboxes (``connect`` with a scoped credential) need not
            # read the token file: it finds the daemon, and anything it asks with no credential is refused.
            self._client = AsyncGymClient(address=find_daemon(url=url, socket=socket, token="", state_dir=state_dir))
        self._defaults = {"provider": provider, "pool": pool, "network": network}
        self._default_timeout_s = float(default_timeout_s)
        self._max_output_bytes = max_output_bytes
        self._exec_shell = exec_shell
        self._ttl_s = ttl_s
        self._max_download_bytes = int(max_download_bytes)
        self._daemon_id: str | None = None
        # Borrowed handles not yet let go: NeMo Gym's ``AsyncSandbox.disconnect()`` reaches the
        # provider only through ``aclose()``, which then revokes their credentials.
        self._borrowed: list[SandboxHandle] = []

    def _of(self, handle: SandboxHandle) -> AsyncGymClient:
        """The client a handle's calls go through: its scoped credential's when borrowed."""
        state: _SandboxState = handle.raw
        return state.client or self._client

    @property
    def client(self) -> AsyncGymClient:
        """The daemon's client this provider uses (for what NeMo Gym's protocol has no call for)."""
        return self._client

    # Create.

    def _options(self, spec: SandboxSpec) -> dict[str, Any]:
        options = dict(spec.provider_options or {})
        unknown = sorted(set(options) - _PROVIDER_OPTION_KEYS)
        if unknown:
            raise GymSandboxdCreateError(
                f"unknown provider_options for {PROVIDER_NAME}: {', '.join(unknown)} (known: {', '.join(sorted(_PROVIDER_OPTION_KEYS))})"
            )
        merged = {key: value for key, value in self._defaults.items() if value is not None}
        merged.update({key: value for key, value in options.items() if value is not None})
        if "options" in merged and not isinstance(merged["options"], Mapping):
            raise GymSandboxdCreateError("provider_options['options'] (the daemon provider's own options) must be a mapping")
        return merged

    def _refuse_unhonourable(self, spec: SandboxSpec, options: dict[str, Any]) -> None:
        if options.get("pool") is not None and (spec.entrypoint or getattr(spec, "ports", ())):
            raise GymSandboxdCreateError(
                "spec.entrypoint and spec.ports cannot be honoured with provider_options['pool']: "
                "a pool's sandboxes were made from the pool's own spec (declare them there)"
            )
        if spec.resources.gpu_type is not None:
            raise GymSandboxdCreateError("resources.gpu_type cannot be honoured: the daemon asks for a number of GPUs, not a type")

    def _daemon_spec(self, spec: SandboxSpec, options: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
        resources: dict[str, Any] = {}
        if spec.resources.cpu is not None:
            resources["cpus"] = spec.resources.cpu
        if spec.resources.memory_mib is not None:
            resources["memoryMiB"] = spec.resources.memory_mib
        if spec.resources.disk_gib is not None:
            resources["diskMiB"] = spec.resources.disk_gib * 1024
        if spec.resources.gpu:
            resources["gpus"] = spec.resources.gpu
        if options.get("pids_limit") is not None:
            resources["pidsLimit"] = int(options["pids_limit"])
        daemon_spec: dict[str, Any] = {"image": spec.image, "env": dict(spec.env), "labels": labels}
        if resources:
            daemon_spec["resources"] = resources
        if spec.workdir is not None:
            daemon_spec["workdir"] = spec.workdir
        if getattr(spec, "ports", ()):  # NeMo Gym 0.4's SandboxSpec has no ports
            daemon_spec["ports"] = [int(port) for port in spec.ports]
        if spec.entrypoint:
            daemon_spec["entrypoint"] = [str(argument) for argument in spec.entrypoint]
        for key in ("provider", "network", "user"):
            if options.get(key) is not None:
                daemon_spec[key] = str(options[key])
        if options.get("options"):
            daemon_spec["providerOptions"] = dict(options["options"])
        ttl = spec.ttl_s if spec.ttl_s is not None else self._ttl_s
        if ttl is not None:
            daemon_spec["ttlSeconds"] = max(1, math.ceil(ttl))
        if spec.files:
            daemon_spec["files"] = [
                {"path": _absolute(path, spec.workdir, "a seed file's path"), "content": content}
                for path, content in spec.files.items()
            ]
        if spec.ready_timeout_s is not None or options.get("readiness_command"):
            readiness: dict[str, Any] = {"command": str(options.get("readiness_command") or "true")}
            if spec.ready_timeout_s is not None:
                readiness["timeoutMs"] = min(600_000, max(1, math.ceil(spec.ready_timeout_s * 1000)))
            daemon_spec["readiness"] = readiness
        return daemon_spec

    async def create(self, spec: SandboxSpec) -> SandboxHandle:
        """Creates a sandbox (or takes one from a pool) and returns once it runs commands.

        Everything is checked before anything is allocated: an option or field the daemon cannot
        honour raises :class:`GymSandboxdCreateError`; a sandbox that never got ready raises
        :class:`GymSandboxdCreateVerificationError`, with what was made removed.
        """
        options = self._options(spec)
        self._refuse_unhonourable(spec, options)
        labels = _labels(spec.metadata or {})
        # Names this create, so a wait that gives up can still find and remove what it made.
        labels["nemo-gym.create"] = uuid.uuid4().hex[:16]
        pool = options.get("pool")
        try:
            if spec.files:
                for path in spec.files:
                    _absolute(path, spec.workdir, "a seed file's path")
        except ValueError as error:
            raise GymSandboxdCreateError(str(error)) from error
        if pool is not None:
            created = await self._acquire(str(pool), spec, labels)
        else:
            if not spec.image:
                raise GymSandboxdCreateError(f"spec.image is required for {PROVIDER_NAME} (or provider_options['pool'])")
            created = await self._create_bounded(self._daemon_spec(spec, options, labels), spec.ready_timeout_s, labels)
        sandbox_id = created["id"]
        workdir = spec.workdir if spec.workdir is not None else created["spec"].get("workdir")
        try:
            shell = self._exec_shell or await self._detect_shell(sandbox_id)
            if pool is not None and spec.files:
                for path, content in spec.files.items():
                    await self._client.write_file(sandbox_id, _absolute(path, workdir, "a seed file's path"), content.encode("utf-8"))
        except BaseException as error:
            await self._discard(sandbox_id)
            if isinstance(error, GymError):
                raise GymSandboxdCreateVerificationError(f"sandbox {sandbox_id} failed its first commands: {error}", error) from error
            raise
        return SandboxHandle(sandbox_id=sandbox_id, provider_name=self.name, raw=_SandboxState(sandbox_id, shell, workdir))

    async def _create_bounded(self, daemon_spec: dict[str, Any], ready_timeout_s: float | None, labels: dict[str, str]) -> Any:
        try:
            if ready_timeout_s is None:
                return await self._client.create_sandbox(daemon_spec)  # type: ignore[arg-type]
            # The daemon's probe has this budget; the margin is for the start itself, so the wait
            # is bounded even when the daemon or its backend stops answering.
            async with asyncio.timeout(ready_timeout_s + 30):
                return await self._client.create_sandbox(daemon_spec)  # type: ignore[arg-type]
        except TimeoutError as error:
            await self._discard_labelled(labels)
            raise GymSandboxdCreateVerificationError(f"the sandbox was not ready within {ready_timeout_s:g}s") from error
        except SandboxStartFailedError as error:
            raise GymSandboxdCreateVerificationError(f"the sandbox never became ready: {error.message}", error) from error
        except GymError as error:
            raise GymSandboxdCreateError(f"the daemon did not create the sandbox: {error}", error) from error

    async def _acquire(self, pool: str, spec: SandboxSpec, labels: dict[str, str]) -> Any:
        try:
            stats = await self._client.get_pool(pool)
        except GymError as error:
            raise GymSandboxdCreateError(f"pool {pool!r}: {error}", error) from error
        pool_spec = stats["definition"].get("spec", {})
        # A member cannot change what it was created with; only env, labels and the lease differ per acquire.
        mismatched = [
            name
            for name, wanted, has in (
                ("image", spec.image, pool_spec.get("image")),
                ("workdir", spec.workdir, pool_spec.get("workdir")),
            )
            if wanted is not None and wanted != has
        ]
        if mismatched or any(getattr(spec.resources, name) is not None for name in ("cpu", "memory_mib", "disk_gib", "gpu")):
            raise GymSandboxdCreateError(
                f"pool {pool!r} members are made from its own spec; "
                f"{', '.join(mismatched) or 'resources'} of this spec differ(s) from it (only env, metadata, files and ttl_s may)"
            )
        ttl = spec.ttl_s if spec.ttl_s is not None else self._ttl_s
        try:
            return await self._client.acquire(
                pool, env=dict(spec.env), labels=labels, ttl_seconds=None if ttl is None else max(1, math.ceil(ttl))
            )
        except GymError as error:
            raise GymSandboxdCreateError(f"acquire from pool {pool!r} failed: {error}", error) from error

    async def _detect_shell(self, sandbox_id: str, client: AsyncGymClient | None = None) -> str:
        result = await (client or self._client).exec(sandbox_id, command="command -v bash", session="nemo-1", timeout_ms=30_000)
        if result["status"] == "sandbox_gone":
            raise SandboxNotReadyError(f"sandbox {sandbox_id} died before its first command")
        return "bash" if result["status"] == "ok" and result["exitCode"] == 0 else "sh"

    async def _discard(self, sandbox_id: str) -> None:
        try:
            await self._client.delete_sandbox(sandbox_id)
        except GymError:
            pass  # its lease ends it; the create's own error is the one to report

    async def _discard_labelled(self, labels: dict[str, str]) -> None:
        try:
            for sandbox in await self._client.list_sandboxes(labels={"nemo-gym.create": labels["nemo-gym.create"]}):
                await self._discard(sandbox["id"])
        except GymError:
            pass

    # Commands.

    async def exec(
        self,
        handle: SandboxHandle,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: int | float | None = None,
        user: str | int | None = None,
    ) -> SandboxExecResult:
        """Runs ``<shell> -c command``; never raises for the command's own failure.

        As NeMo Gym's Docker and Apptainer providers do: a non-zero exit is its ``return_code``;
        a timeout is ``return_code`` 125 with ``error_type="timeout"`` (here every process the
        command started is killed, and the sandbox stays usable); a sandbox that is gone, or a
        daemon that does not answer, is 125 with ``error_type="sandbox"``.
        """
        state: _SandboxState = handle.raw
        effective_timeout = float(timeout_s) if timeout_s is not None else self._default_timeout_s
        session = state.take_session()
        try:
            result = await self._of(handle).exec(
                state.sandbox_id,
                [state.shell, "-c", command],
                session=session,
                cwd=None if cwd is None else _absolute(cwd, state.workdir, "cwd"),
                env=env,
                timeout_ms=max(1, math.ceil(effective_timeout * 1000)),
                max_output_bytes=self._max_output_bytes,
                user=None if user is None else str(user),
            )
        except _SANDBOX_UNREACHABLE as error:
            return SandboxExecResult(stdout=None, stderr=str(error), return_code=SANDBOX_RUNTIME_RETURN_CODE, error_type="sandbox")
        except TimeoutError as error:
            # The daemon did not answer within the command's timeout and a margin: as NeMo Gym's
            # providers report a runtime that hung.
            note = f"no answer from the daemon within {effective_timeout:g}s and a margin: {error}"
            return SandboxExecResult(stdout=None, stderr=note, return_code=SANDBOX_RUNTIME_RETURN_CODE, error_type="timeout")
        finally:
            if session is not None:
                state.idle_sessions.append(session)
        return _exec_result(result, effective_timeout)

    # Terminals (NeMo Gym's SupportsSandboxPty and SupportsSandboxPtyAttach: ``_nemo_pty.py``).

    async def create_pty(self, handle: SandboxHandle, spec: Any) -> GymSandboxdPtySession:
        """A terminal in the sandbox (the daemon's: it outlives this process, never its sandbox)."""
        state: _SandboxState = handle.raw
        return await create_pty_session(self._of(handle), state.sandbox_id, spec, state.workdir)

    async def attach_pty(
        self, handle: SandboxHandle, session_id: str, *, takeover: bool = True, since: int | None = None
    ) -> GymSandboxdPtySession:
        """Holds a terminal opened elsewhere; ``since`` replays from that byte offset."""
        state: _SandboxState = handle.raw
        return await attach_pty_session(self._of(handle), state.sandbox_id, session_id, takeover=takeover, since=since)

    # Files.

    async def upload_file(self, handle: SandboxHandle, source_path: Path, target_path: str) -> None:
        """Streams one local file into the sandbox (parents created, its permission bits kept)."""
        state: _SandboxState = handle.raw
        target = _absolute(target_path, state.workdir, "target_path")
        try:
            mode = os.stat(source_path).st_mode & 0o777
            await self._of(handle).write_file(state.sandbox_id, target, Path(source_path), mode=mode)
        except GymError as error:
            raise SandboxFileError(f"upload of {source_path} to {target!r} failed: {error}", error) from error

    async def download_file(self, handle: SandboxHandle, source_path: str, target_path: Path) -> None:
        """Streams one sandbox file to a local path (parents created), at most ``max_download_bytes``."""
        state: _SandboxState = handle.raw
        source = _absolute(source_path, state.workdir, "source_path")
        try:
            await self._of(handle).download_file(
                state.sandbox_id, source, Path(target_path), max_bytes=self._max_download_bytes
            )
        except GymError as error:
            raise SandboxFileError(f"download of {source!r} failed: {error}", error) from error

    # Lifecycle.

    async def status(self, handle: SandboxHandle) -> SandboxStatus:
        """The daemon's state of the sandbox; one it calls ready is also asked to run ``true``.

        The daemon learns of a sandbox killed behind its back (in the engine) at its next use
        or orphan scan; the probe (through a session, about a millisecond) makes that now.
        """
        try:
            sandbox = await self._of(handle).get_sandbox(handle.sandbox_id)
            if sandbox["state"] == "ready":
                state: _SandboxState = handle.raw
                session = state.take_session()
                try:
                    probe = await self._of(handle).exec(handle.sandbox_id, ["true"], session=session, timeout_ms=30_000)
                finally:
                    if session is not None:
                        state.idle_sessions.append(session)
                if probe["status"] == "sandbox_gone":
                    return SandboxStatus.STOPPED
        except (SandboxNotFoundError, SandboxNotReadyError):
            return SandboxStatus.STOPPED
        except GymError:
            return SandboxStatus.UNKNOWN
        return {
            "creating": SandboxStatus.STARTING,
            "ready": SandboxStatus.RUNNING,
            "destroying": SandboxStatus.STOPPED,
            "gone": SandboxStatus.STOPPED,
            "failed": SandboxStatus.ERROR,
        }.get(sandbox["state"], SandboxStatus.UNKNOWN)

    async def close(self, handle: SandboxHandle) -> None:
        """Destroys the sandbox; one already gone is a success (safe from cleanup paths). A borrowed
        handle (a scoped credential) cannot destroy what it was lent: its close is :meth:`disconnect`."""
        if isinstance(handle.raw, _SandboxState) and handle.raw.grant_id is not None:
            await self.disconnect(handle)
            return
        try:
            await self._client.delete_sandbox(handle.sandbox_id)
        except SandboxNotFoundError:
            return
        except GymError as error:
            raise RuntimeError(f"destroying sandbox {handle.sandbox_id} failed: {error}") from error

    async def aclose(self) -> None:
        """Lets go of the borrowed handles it still holds (their credentials revoked: NeMo Gym's
        ``AsyncSandbox.disconnect()`` ends here, not in :meth:`close`) and closes this event loop's
        idle connections; the provider stays usable (it reconnects)."""
        try:
            while self._borrowed:
                await self.disconnect(self._borrowed[-1])
        finally:
            await self._client.aclose()

    # ConnectableProvider.

    async def _current_daemon_id(self) -> str:
        if self._daemon_id is None:
            self._daemon_id = str((await self._client.health()).get("daemonId", ""))
        return self._daemon_id

    async def serialize_handle(self, handle: SandboxHandle, *, scope: str | None = None) -> dict[str, Any]:
        """A descriptor another process rebuilds the handle from with :meth:`connect`.

        Without ``scope``: no secret (the connecting process needs the daemon's token). With
        ``scope="operate"``: a scoped credential for this sandbox alone (``exec`` and ``files``:
        commands, uploads, downloads, status; never destroy, keepalive, fork, snapshots, pools or
        another sandbox) that dies with the lease as it stands now, the sandbox, or :meth:`disconnect`.
        The descriptor is then a bearer secret: never into a sandbox or a log. ``ValueError`` for
        another scope; a borrowed handle cannot lend further (``AccessDeniedError``).
        """
        state: _SandboxState = handle.raw
        descriptor: dict[str, Any] = {
            "provider": self.name,
            "sandbox_id": state.sandbox_id,
            "shell": state.shell,
            "workdir": state.workdir,
        }
        if scope is None:
            return {**descriptor, "daemon_id": await self._current_daemon_id()}
        if scope != "operate":
            raise ValueError(f"scope {scope!r} is not one the daemon lends; use None or 'operate'")
        return {**descriptor, **await operate_access(self._client, state.sandbox_id)}

    async def connect(self, descriptor: Mapping[str, Any]) -> SandboxHandle:
        """Rebuilds a handle from :meth:`serialize_handle`'s descriptor, after checking the sandbox is live.

        Raises ``RuntimeError`` when the descriptor names another daemon or a sandbox that is not ready.
        """
        sandbox_id = str(descriptor["sandbox_id"])
        access = descriptor.get("access")
        if isinstance(access, Mapping):
            return await self._connect_scoped(sandbox_id, descriptor, access)
        wanted = descriptor.get("daemon_id")
        if wanted and wanted != await self._current_daemon_id():
            raise RuntimeError(f"sandbox {sandbox_id} belongs to daemon {wanted}, not to the one this provider reaches")
        try:
            sandbox = await self._client.get_sandbox(sandbox_id)
        except GymError as error:
            raise RuntimeError(f"cannot connect to sandbox {sandbox_id}: {error}") from error
        if sandbox["state"] != "ready":
            raise RuntimeError(f"cannot connect to sandbox {sandbox_id}: it is {sandbox['state']}")
        shell = str(descriptor.get("shell") or self._exec_shell or await self._detect_shell(sandbox_id))
        workdir = descriptor.get("workdir") or sandbox["spec"].get("workdir")
        return SandboxHandle(sandbox_id=sandbox_id, provider_name=self.name, raw=_SandboxState(sandbox_id, shell, workdir))

    async def _connect_scoped(self, sandbox_id: str, descriptor: Mapping[str, Any], access: Mapping[str, Any]) -> SandboxHandle:
        client = borrowed_client(self._client, access)
        try:
            sandbox = await client.get_sandbox(sandbox_id)
            if sandbox["state"] != "ready":
                raise SandboxNotReadyError(f"it is {sandbox['state']}")
            shell = str(descriptor.get("shell") or self._exec_shell or await self._detect_shell(sandbox_id, client))
        except GymError as error:
            await client.aclose()
            raise RuntimeError(f"cannot connect to sandbox {sandbox_id} with its scoped credential: {error}") from error
        workdir = descriptor.get("workdir") or sandbox["spec"].get("workdir")
        state = _SandboxState(sandbox_id, shell, workdir, client=client, grant_id=str(access.get("grant_id") or "") or None)
        handle = SandboxHandle(sandbox_id=sandbox_id, provider_name=self.name, raw=state)
        self._borrowed.append(handle)
        return handle

    async def disconnect(self, handle: SandboxHandle) -> None:
        """Lets go of a handle without ending the sandbox: a borrowed one revokes its own credential
        (one already dead is a success: safe from cleanup paths)."""
        state: _SandboxState = handle.raw
        client, state.client = state.client, None
        self._borrowed = [held for held in self._borrowed if held is not handle]
        if client is not None:
            await release(client, state.grant_id, handle.sandbox_id)

    # Declared ports.

    async def endpoint(self, handle: SandboxHandle, port: int) -> SandboxEndpoint:
        """A declared port of the sandbox as the caller reaches it: a URL on the daemon, and the
        sandbox's port key in ``headers`` (``x-gym-port-key``), which every request there must carry.

        HTTP and WebSocket upgrades both pass; the key holds for this sandbox's declared ports alone.
        """
        client = self._of(handle)
        found = await client.port_endpoint(handle.sandbox_id, port)
        origin = client.address.url
        if origin is None:
            raise NotImplementedError(
                f"{PROVIDER_NAME} cannot give a URL for port {port}: the daemon listens on a unix socket (give it a TCP address)"
            )
        return SandboxEndpoint(endpoint=origin.rstrip("/") + found["path"], headers=dict(found["headers"]))

    # The model gateway.

    async def model_endpoint(
        self,
        handle: SandboxHandle,
        *,
        rollout_id: str | None = None,
        upstream: Mapping[str, str] | None = None,
    ) -> SandboxEndpoint:
        """The model as an agent inside the sandbox reaches it: an OpenAI base URL and its key.

        Opens a gateway rollout (every call through it is recorded; read them with
        ``provider.client.rollout_records(rollout_id)``) and makes the gateway reachable inside the
        sandbox. ``headers`` carries ``Authorization: Bearer <key>``; ``rollout_id`` is
        ``endpoint.headers["X-Gym-Rollout-Id"]``.
        """
        reach = await self._of(handle).expose_gateway(handle.sandbox_id)
        rollout = await self._client.open_rollout(rollout_id, upstream=dict(upstream) if upstream else None)  # type: ignore[arg-type]
        return SandboxEndpoint(
            endpoint=self._client.rollout_url(rollout, reach),
            headers={"Authorization": f"Bearer {rollout['key']}", "X-Gym-Rollout-Id": rollout["rolloutId"]},
        )

