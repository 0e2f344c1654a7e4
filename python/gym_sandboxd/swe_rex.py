"""A SWE-ReX deployment and runtime on gym-sandboxd: SWE-ReX's calls in a sandbox of the daemon.

``GymSandboxdDeployment`` (config: :class:`GymSandboxdDeploymentConfig`) makes one sandbox on
``start()`` and destroys it on ``stop()``; its ``runtime`` (:class:`GymSandboxdRuntime`, in
``_swe_rex_runtime``) is SWE-ReX's ``AbstractRuntime``: bash sessions (``create_session``,
``run_in_session`` with ``expect``, ``check``, timeouts, interactive programs and interrupts,
``close_session``), ``execute``, ``read_file``, ``write_file``, ``upload``, ``is_alive`` and
``close``, raising SWE-ReX's own exceptions. Importing this module needs swe-rex; importing
``gym_sandboxd`` does not. See docs/integrations/swe-rex.md.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
import weakref
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from swerex.deployment.abstract import AbstractDeployment
from swerex.deployment.hooks.abstract import CombinedDeploymentHook, DeploymentHook
from swerex.exceptions import DeploymentNotStartedError, DeploymentStartupError
from swerex.runtime.abstract import IsAliveResponse

from ._swe_rex_runtime import CommandEndedError, GymSandboxdRuntime, RequestReplayedError
from .client import GymClient
from .errors import GymError

__all__ = [
    "CommandEndedError",
    "GymSandboxdDeployment",
    "GymSandboxdDeploymentConfig",
    "GymSandboxdRuntime",
    "RequestReplayedError",
]

SANDBOX_LABEL = ("swe-rex", "1")
# A label naming one `start()`: its value is random, so a second sandbox made by the same create
# sent twice is found and destroyed.
START_LABEL = "swe-rex-start"


class GymSandboxdDeploymentConfig(BaseModel):
    """The sandbox and the daemon of a :class:`GymSandboxdDeployment`.

    The sandbox: ``image``, or ``pool`` to take a ready one from a warm pool; ``provider``,
    ``provider_options``, ``resources``, ``network`` (``none`` unless set), ``user``, ``workdir``
    (where sessions start), ``env``, ``labels``, ``ttl_seconds`` (its lease, renewed by each call).
    ``max_output_bytes`` bounds a command's output (the daemon's 1 MiB by default, head and tail
    kept); ``max_read_bytes`` a ``read_file`` (64 MiB). The daemon: ``url`` / ``socket`` / ``token``
    / ``state_dir``, else found as the ``gym`` CLI finds it; ``token`` is never dumped.
    """

    model_config = ConfigDict(extra="forbid")

    image: str | None = None
    pool: str | None = None
    provider: str | None = None
    provider_options: dict[str, Any] = {}
    resources: dict[str, Any] = {}
    network: Any = None
    user: str | None = None
    workdir: str | None = None
    env: dict[str, str] = {}
    labels: dict[str, str] = {}
    ttl_seconds: int | None = None
    max_output_bytes: int | None = None
    max_read_bytes: int = 64 * 1024 * 1024
    url: str | None = None
    socket: str | None = None
    token: str | None = Field(default=None, exclude=True, repr=False)
    state_dir: str | None = None

    type: Literal["gym_sandboxd"] = "gym_sandboxd"
    """Discriminator, as SWE-ReX's deployment configs have."""

    @model_validator(mode="after")
    def _one_source(self) -> GymSandboxdDeploymentConfig:
        if (self.image is None) == (self.pool is None):
            raise ValueError("GymSandboxdDeployment needs exactly one of `image` or `pool`")
        if self.pool is not None:
            given = [key for key in ("provider", "user", "network", "workdir") if getattr(self, key) is not None]
            given += [key for key in ("provider_options", "resources") if getattr(self, key)]
            if given:
                raise ValueError(f"{', '.join(given)} belong to the pool's spec; a sandbox acquired from `pool` takes them from it")
        return self

    def get_deployment(self) -> GymSandboxdDeployment:
        return GymSandboxdDeployment.from_config(self)


def _sweep(client: GymClient, start_label: str, keep: str | None, logger: logging.Logger) -> None:
    """Destroys the sandboxes of one ``start()`` but ``keep``: a create sent twice (the client sends
    a request again once when a kept-alive connection turns out closed) may have made two."""
    try:
        strays = [sandbox["id"] for sandbox in client.list_sandboxes(labels={START_LABEL: start_label}) if sandbox["id"] != keep]
        for sandbox_id in strays:
            logger.warning("destroying sandbox %s, made by a create sent twice", sandbox_id)
            client.delete_sandbox(sandbox_id)
    except Exception as error:  # noqa: BLE001 - clean-up must not raise; the lease reaps what is left
        logger.warning("could not look for sandboxes made twice (their leases will reap them): %s", error)


def _destroy(client: GymClient, sandbox_id: str, start_label: str, owns_client: bool, logger: logging.Logger) -> None:
    """Destroys the sandbox (and any twin of it); for ``weakref.finalize``, so it holds no deployment."""
    try:
        client.delete_sandbox(sandbox_id)
    except Exception as error:  # noqa: BLE001 - clean-up must not raise; the lease reaps what is left
        logger.warning("could not destroy sandbox %s (its lease will reap it): %s", sandbox_id, error)
    finally:
        _sweep(client, start_label, None, logger)
        if owns_client:
            client.close()


class GymSandboxdDeployment(AbstractDeployment):
    """SWE-ReX's deployment on the gym-sandboxd daemon: ``start()`` makes the sandbox (or takes one
    from ``pool``), ``stop()`` destroys it; a sandbox is also destroyed when the deployment is
    collected or the interpreter exits. Keywords: :class:`GymSandboxdDeploymentConfig`."""

    def __init__(self, *, logger: logging.Logger | None = None, client: GymClient | None = None, **kwargs: Any) -> None:
        self._config = GymSandboxdDeploymentConfig(**kwargs)
        self.logger = logger or logging.getLogger("rex-deploy")
        self._hooks = CombinedDeploymentHook()
        self._given_client = client
        self._runtime: GymSandboxdRuntime | None = None
        self._finalizer: weakref.finalize | None = None

    @classmethod
    def from_config(cls, config: GymSandboxdDeploymentConfig) -> GymSandboxdDeployment:
        return cls(**config.model_dump(exclude={"type"}), token=config.token)

    def add_hook(self, hook: DeploymentHook) -> None:
        self._hooks.add_hook(hook)

    @property
    def runtime(self) -> GymSandboxdRuntime:
        """The runtime; ``DeploymentNotStartedError`` before ``start()`` or after ``stop()``."""
        if self._runtime is None:
            raise DeploymentNotStartedError()
        return self._runtime

    @property
    def sandbox_id(self) -> str:
        return self.runtime.sandbox_id

    async def is_alive(self, *, timeout: float | None = None) -> IsAliveResponse:
        return await self.runtime.is_alive(timeout=timeout)

    async def start(self) -> None:
        """Makes the sandbox and answers when it is ready. ``DeploymentStartupError`` when the
        daemon cannot (its :class:`~gym_sandboxd.errors.GymError` as the cause; nothing is left
        behind). A started deployment is left as it is."""
        if self._runtime is not None:
            return
        config = self._config
        client = self._given_client or GymClient(url=config.url, socket=config.socket, token=config.token, state_dir=config.state_dir)
        owns_client = self._given_client is None
        start_label = uuid.uuid4().hex[:16]
        labels = {**config.labels, SANDBOX_LABEL[0]: SANDBOX_LABEL[1], START_LABEL: start_label}
        self._hooks.on_custom_step("Starting gym-sandboxd sandbox")

        def create() -> str:
            if config.pool is not None:
                return client.acquire(config.pool, env=config.env or None, labels=labels, ttl_seconds=config.ttl_seconds)["id"]
            spec: dict[str, Any] = {"image": config.image, "labels": labels}
            optional = {
                "provider": config.provider,
                "user": config.user,
                "workdir": config.workdir,
                "network": config.network,
                "ttlSeconds": config.ttl_seconds,
                "env": config.env or None,
                "resources": config.resources or None,
                "providerOptions": config.provider_options or None,
            }
            spec.update({key: value for key, value in optional.items() if value is not None})
            return client.create_sandbox(spec)["id"]  # type: ignore[arg-type]

        try:
            sandbox_id = await asyncio.to_thread(create)
        except BaseException as error:
            await asyncio.to_thread(_sweep, client, start_label, None, self.logger)
            if owns_client:
                client.close()
            if isinstance(error, GymError):
                # SWE-ReX's own type for a deployment that cannot start; the daemon's typed error
                # (its `code`: IMAGE_NOT_FOUND, CAPACITY_EXCEEDED, ...) is its cause.
                raise DeploymentStartupError(f"gym-sandboxd could not start the sandbox: {error}") from error
            raise
        await asyncio.to_thread(_sweep, client, start_label, sandbox_id, self.logger)
        self.logger.info("sandbox %s ready", sandbox_id)
        self._finalizer = weakref.finalize(self, _destroy, client, sandbox_id, start_label, owns_client, self.logger)
        self._runtime = GymSandboxdRuntime(
            client, sandbox_id, max_output_bytes=config.max_output_bytes, max_read_bytes=config.max_read_bytes,
            workdir=config.workdir, logger=self.logger,
        )

    async def stop(self) -> None:
        """Ends the sessions and destroys the sandbox; idempotent, and harmless before ``start()``."""
        runtime, self._runtime = self._runtime, None
        if runtime is not None:
            try:
                await runtime.close()
            except Exception as error:  # noqa: BLE001 - the sandbox goes anyway, and with it its processes
                self.logger.warning("closing the sessions of sandbox %s: %s", runtime.sandbox_id, error)
        if self._finalizer is not None:
            await asyncio.to_thread(self._finalizer)
