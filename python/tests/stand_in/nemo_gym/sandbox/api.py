"""Stand-in of ``nemo_gym.sandbox.api`` (see ``nemo_gym/__init__.py``): the two facades.

``AsyncSandbox`` as documented: ``start`` creates through the provider and then uploads the
spec's ``files`` one by one (a failure closes the sandbox and the provider); ``exec`` defaults
``cwd`` to the spec's workdir and ``timeout_s`` to 180; ``stop`` closes the sandbox, then the
provider (``aclose``); ``serialize``/``connect`` need a ``ConnectableProvider``. ``Sandbox`` runs
the same on an event loop of its own, in a background thread.
"""

import asyncio
import tempfile
import threading
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from nemo_gym.sandbox.providers import (
    ConnectableProvider,
    SandboxEndpoint,
    SandboxExecResult,
    SandboxHandle,
    SandboxSpec,
    SandboxStatus,
    SupportsSandboxEndpoint,
    create_provider,
)

T = TypeVar("T")
DEFAULT_EXEC_TIMEOUT_S = 180


class AsyncSandbox:
    def __init__(self, provider: Any, spec: SandboxSpec | None = None) -> None:
        self._provider = create_provider(provider) if isinstance(provider, Mapping) else provider
        self._spec = spec
        self._handle: SandboxHandle | None = None
        self._stopped = True
        self._closed = False

    def _require_handle(self) -> SandboxHandle:
        if self._handle is None or self._stopped:
            raise RuntimeError("Sandbox has not been started")
        return self._handle

    async def start(self, spec: SandboxSpec | None = None) -> "AsyncSandbox":
        if self._closed:
            raise RuntimeError("Sandbox has been stopped")
        if self._handle is not None and not self._stopped:
            raise RuntimeError("Sandbox is already started")
        wanted = spec if spec is not None else self._spec
        if wanted is None:
            raise ValueError("Sandbox.start() requires a SandboxSpec")
        handle = await self._provider.create(wanted)
        try:
            if wanted.files:
                with tempfile.TemporaryDirectory() as directory:
                    for index, (target, text) in enumerate(wanted.files.items()):
                        local = Path(directory) / f"seed-{index}"
                        local.write_text(text, encoding="utf-8")
                        await self._provider.upload_file(handle, local, target)
        except Exception:
            await self._provider.close(handle)
            await self._provider.aclose()
            self._closed = True
            raise
        self._spec, self._handle, self._stopped = wanted, handle, False
        return self

    async def exec(
        self,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: int | float | None = DEFAULT_EXEC_TIMEOUT_S,
        user: str | int | None = None,
    ) -> SandboxExecResult:
        workdir = self._spec.workdir if self._spec is not None else None
        return await self._provider.exec(
            self._require_handle(), command, cwd=cwd if cwd is not None else workdir, env=env, timeout_s=timeout_s, user=user
        )

    async def upload(self, local_path: Path | str, remote_path: str) -> None:
        await self._provider.upload_file(self._require_handle(), Path(local_path), remote_path)

    async def download(self, remote_path: str, local_path: Path | str) -> None:
        await self._provider.download_file(self._require_handle(), remote_path, Path(local_path))

    async def status(self) -> SandboxStatus:
        if self._handle is None:
            return SandboxStatus.UNKNOWN
        if self._stopped:
            return SandboxStatus.STOPPED
        return await self._provider.status(self._handle)

    async def endpoint(self, port: int) -> SandboxEndpoint:
        declared = self._spec.ports if self._spec is not None else ()
        if port not in declared:
            raise ValueError(f"Sandbox port {port} was not declared in SandboxSpec.ports")
        if not isinstance(self._provider, SupportsSandboxEndpoint):
            raise NotImplementedError("the provider does not support service endpoints")
        return await self._provider.endpoint(self._require_handle(), port)

    async def stop(self) -> None:
        if self._closed:
            return
        try:
            if self._handle is not None and not self._stopped:
                self._stopped = True
                await self._provider.close(self._handle)
        finally:
            await self._provider.aclose()
            self._closed = True

    async def serialize(self, *, scope: str | None = None) -> dict[str, Any]:
        if not isinstance(self._provider, ConnectableProvider):
            raise RuntimeError("the provider does not support serialize()/connect()")
        descriptor = await self._provider.serialize_handle(self._require_handle(), scope=scope)
        if descriptor.get("workdir") is None and self._spec is not None:
            descriptor = {**descriptor, "workdir": self._spec.workdir}
        return descriptor

    @classmethod
    async def connect(cls, descriptor: Mapping[str, Any], *, provider: Any) -> "AsyncSandbox":
        if not isinstance(provider, ConnectableProvider):
            raise RuntimeError("the provider does not support serialize()/connect()")
        handle = await provider.connect(descriptor)
        sandbox = cls(provider, SandboxSpec(workdir=descriptor.get("workdir")))
        sandbox._handle, sandbox._stopped = handle, False
        return sandbox

    async def __aenter__(self) -> "AsyncSandbox":
        return self

    async def __aexit__(self, *_: Any) -> None:
        await self.stop()


class _LoopThread:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        ready = threading.Event()

        def run() -> None:
            asyncio.set_event_loop(self.loop)
            ready.set()
            self.loop.run_forever()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        ready.wait()

    def run(self, factory: Callable[[], Awaitable[T]]) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            raise RuntimeError("Sandbox methods block; use AsyncSandbox in async code")
        return asyncio.run_coroutine_threadsafe(factory(), self.loop).result()  # type: ignore[arg-type]

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


class Sandbox:
    """The sync facade: each call runs the ``AsyncSandbox`` one on the background loop."""

    def __init__(self, provider: Any, spec: SandboxSpec | None = None) -> None:
        self._runner = _LoopThread()

        async def build() -> AsyncSandbox:
            return AsyncSandbox(provider, spec)

        self._sandbox = self._runner.run(build)
        self._closed = False

    def start(self, spec: SandboxSpec | None = None) -> "Sandbox":
        self._runner.run(lambda: self._sandbox.start(spec))
        return self

    def exec(self, command: str, **options: Any) -> SandboxExecResult:
        return self._runner.run(lambda: self._sandbox.exec(command, **options))

    def upload(self, local_path: Path | str, remote_path: str) -> None:
        self._runner.run(lambda: self._sandbox.upload(local_path, remote_path))

    def download(self, remote_path: str, local_path: Path | str) -> None:
        self._runner.run(lambda: self._sandbox.download(remote_path, local_path))

    def status(self) -> SandboxStatus:
        return SandboxStatus.STOPPED if self._closed else self._runner.run(self._sandbox.status)

    def stop(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._runner.run(self._sandbox.stop)
        finally:
            self._runner.close()

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *_: Any) -> None:
        self.stop()
