"""A Harbor environment on the gym-sandboxd daemon.

Harbor selects it by import path: ``harbor run --env gym_sandboxd.harbor:GymSandboxdEnvironment``
(``environment.import_path`` in a job config); its options are ``--ek key=value``
(:class:`GymSandboxdOptions`). Each trial's environment is one sandbox of the daemon, on whatever
backend the daemon runs (Docker, Kubernetes, Apptainer or Enroot over SSH, ...). Tested with
Harbor 0.26.0.

What it keeps of Harbor's own Docker environment: a task's ``environment/Dockerfile`` is built
(by the ``gym`` command, exactly as ``gym eval run`` builds a Harbor task: the same Dockerfile
subset, the same image, so both share it), or its ``docker_image`` used; the image's ENTRYPOINT
runs; ``exec`` runs ``bash -c command`` (``sh -c`` where the image has no bash) in the task's
``workdir`` with the trial's environment variables and answers the exit code with stdout and
stderr; a command past ``timeout_sec`` raises ``RuntimeError("Command timed
out after N seconds")``; a build that fails raises Harbor's ``SandboxBuildFailedError`` (not
retried). Where it differs, on purpose: a command past its timeout, or whose call Harbor cancels
(an agent past its time limit), is killed with every process it started (Docker's runs on, into
the verifier's phase), and each network policy, the startup one and each phase's,
is enforced by the daemon's egress proxy (``dynamic_network_policy``).

A Compose task (``environment/docker-compose.yaml``) runs as the daemon's group: ``main`` is the
sandbox, its other services run beside it in its network namespace (each name resolves to
loopback), built by the same ``gym image build`` (on a provider with the ``services``
capability: Docker). Harbor's ``[environment.healthcheck]`` and MCP servers are Harbor's own.

Refused, each with a clear error before anything starts: extra Compose files
(``--extra-docker-compose``) and a Compose task with a prebuilt image, GPUs and TPUs, Windows tasks, writable or volume mounts
(read-only bind mounts go to the Docker provider, which needs the operator's leave), CIDR ranges
in an allow-list, stream mode. A policy beyond the operator's egress cap (Harbor's default is
``public``; the daemon's default cap allows nothing) is refused by the daemon at start.

This module needs Harbor; importing ``gym_sandboxd`` does not import it.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
from pathlib import Path
from typing import Any, ClassVar

from harbor.environments.base import BaseEnvironment, ExecResult, SandboxBuildFailedError
from harbor.environments.capabilities import EnvironmentCapabilities, EnvironmentResourceCapabilities
from harbor.environments.definition import (
    COMPOSE_FILE_NAME,
    require_agent_environment_definition,
    should_use_prebuilt_docker_image,
)
from harbor.environments.options import EnvironmentOptions
from harbor.models.task.config import NetworkMode, NetworkPolicy, TaskOS
from harbor.models.trial.config import ResourceMode
from pydantic import Field

from .aio import AsyncGymClient
from .client import GymClient
from .errors import CapabilityUnsupportedError, ForbiddenByConfigError, GymError
from .schema import SandboxSpec

__all__ = ["GymSandboxdEnvironment", "GymSandboxdOptions"]

ENVIRONMENT_TYPE = "gym-sandboxd"
# A label on every sandbox made for Harbor, to find them (`gym sandbox ls -l harbor=1`).
SANDBOX_LABEL = ("harbor", "1")
# Harbor's `timeout_sec=None` means no timeout; the daemon's longest is a day.
MAX_EXEC_TIMEOUT_MS = 24 * 3600 * 1000
# Starting the image's ENTRYPOINT in the background returns at once; this bounds a shell that hangs.
ENTRYPOINT_START_TIMEOUT_SEC = 30
# Harbor reads whole command outputs (agent logs, test output): the daemon's largest cap per
# stream, past which its head and tail are kept with a marker between.
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
# Harbor's Docker environment runs `bash -c command` (its images ship bash); on an image without
# bash (busybox) the command runs under `sh -c` rather than not at all. `exec` keeps one process.
_SHELL = ["sh", "-c", 'if command -v bash >/dev/null 2>&1; then exec bash -c "$1"; fi; exec sh -c "$1"', "sh"]
_COMPOSE_REFUSAL = (
    "gym-sandboxd runs a task's own environment/docker-compose.yaml (its other services beside the sandbox), "
    "not extra Compose files (--extra-docker-compose): use one of Harbor's compose-capable environments for this job"
)
_COMPOSE_PREBUILT_REFUSAL = (
    "gym-sandboxd builds a Compose task's services with its image: a Compose task with a prebuilt "
    "[environment].docker_image (or without a Dockerfile) is not supported"
)


class GymSandboxdOptions(EnvironmentOptions):
    """``--ek`` options. The daemon is found as the ``gym`` command finds it: ``state_dir`` (default
    ``GYM_STATE_DIR``, else ``~/.local/state/gym``), or ``url`` / ``socket``; its token from the state
    directory or ``GYM_TOKEN``, never an option (Harbor writes options into the job's config.json)."""

    provider: str | None = Field(default=None, description="The daemon's backend (docker, kubernetes, ...); default its default.")
    provider_options: dict[str, Any] = Field(default_factory=dict, description="The spec's providerOptions, passed as they are.")
    state_dir: str | None = Field(default=None, description="The daemon's state directory.")
    url: str | None = Field(default=None, description="The daemon's URL (http://127.0.0.1:PORT).")
    socket: str | None = Field(default=None, description="The daemon's unix socket.")
    ttl_seconds: int | None = Field(default=None, gt=0, description="The sandbox's lease; default the daemon's.")
    build_provider: str | None = Field(
        default=None,
        description=(
            "The daemon's backend that builds a task's Dockerfile, when `provider` has no image builder "
            "(Kubernetes: its nodes must see that backend's images); default `provider`."
        ),
    )
    gym_command: str = Field(
        default="gym", description="The `gym` command that builds a task's Dockerfile (words split as a shell does)."
    )


def _allowed_host(entry: str) -> str:
    """A Harbor allow-list entry as the daemon writes it (an IPv6 literal in brackets)."""
    return f"[{entry}]" if ":" in entry and not entry.startswith("[") else entry


def _egress_policy(policy: NetworkPolicy) -> tuple[str, list[str]]:
    if policy.network_mode == NetworkMode.NO_NETWORK:
        return "none", []
    if policy.network_mode == NetworkMode.ALLOWLIST:
        return "allowlist", [_allowed_host(entry) for entry in policy.allowed_hosts]
    return "public", []


def _result(result: dict[str, Any], timeout_sec: int | None) -> ExecResult:
    status = result["status"]
    if status == "timeout":
        # As Harbor's Docker environment says it; the daemon has killed the command's processes.
        raise RuntimeError(f"Command timed out after {timeout_sec} seconds")
    if status == "sandbox_gone":
        raise RuntimeError(f"the sandbox is gone: {result.get('reason', 'destroyed or lost while the command ran')}")
    code = result.get("exitCode")
    if code is None:
        # Killed by a signal (`killed`) or for memory (`oom`): the code a shell reports for SIGKILL.
        code = 137
    stderr = result.get("stderr", "")
    if status == "oom":
        stderr += "\n[gym-sandboxd: killed for exceeding the sandbox's memory limit]"
    return ExecResult(stdout=result.get("stdout") or None, stderr=stderr or None, return_code=code)


class GymSandboxdEnvironment(BaseEnvironment):
    """One Harbor trial environment as one sandbox of the gym-sandboxd daemon."""

    options_model: ClassVar[type[EnvironmentOptions] | None] = GymSandboxdOptions
    options: GymSandboxdOptions
    # One build per image at a time: trials of one task that start together wait for the first.
    _build_locks: ClassVar[dict[str, asyncio.Lock]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._sandbox_id: str | None = None
        self._client: AsyncGymClient | None = None
        super().__init__(*args, **kwargs)
        self._validate_mounts()

    @staticmethod
    def type() -> str:
        return ENVIRONMENT_TYPE

    @property
    def capabilities(self) -> EnvironmentCapabilities:
        return EnvironmentCapabilities(
            disable_internet=True,
            network_allowlist=True,
            network_allowlist_hostnames=True,
            network_allowlist_wildcard_hostnames=True,
            network_allowlist_ipv4_addresses=True,
            network_allowlist_ipv6_addresses=True,
            dynamic_network_policy=True,
        )

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        return EnvironmentResourceCapabilities(cpu_limit=True, memory_limit=True, fractional_cpus=True)

    @classmethod
    def preflight(cls, kwargs: dict[str, Any] | None = None) -> None:
        """Checks the options, then that the daemon answers, before Harbor queues any trial."""
        super().preflight(kwargs)
        options = GymSandboxdOptions.model_validate(kwargs or {})
        try:
            with GymClient(url=options.url, socket=options.socket, state_dir=options.state_dir) as client:
                client.health()
        except GymError as error:
            raise SystemExit(f"gym-sandboxd: no daemon to run Harbor's trials on: {error}") from None

    def _validate_definition(self) -> None:
        if self.extra_docker_compose_paths:
            raise ValueError(_COMPOSE_REFUSAL)
        if (self.environment_dir / COMPOSE_FILE_NAME).exists() and (
            self.task_env_config.docker_image or not (self.environment_dir / "Dockerfile").exists()
        ):
            raise ValueError(_COMPOSE_PREBUILT_REFUSAL)
        require_agent_environment_definition(self.environment_dir, docker_image=self.task_env_config.docker_image)
        if self.os == TaskOS.WINDOWS:
            raise RuntimeError("gym-sandboxd runs Linux sandboxes only; this task declares [environment].os = 'windows'")

    def _validate_mounts(self) -> None:
        # Harbor's output folders (/logs/...) are among `_mounts` always, bound to the host only
        # with `auto_mounting`; `_host_mounts` is what would reach the host.
        for mount in self._host_mounts:
            if mount.get("type") != "bind" or not mount.get("read_only"):
                raise ValueError(
                    f"gym-sandboxd mounts host folders read-only only (the Docker provider's readOnlyBinds, "
                    f"allowed by the operator); refused: {mount.get('type')} mount at {mount.get('target')}"
                    f"{'' if mount.get('read_only') else ' (writable)'}"
                )

    def _make_client(self) -> AsyncGymClient:
        return AsyncGymClient(url=self.options.url, socket=self.options.socket, state_dir=self.options.state_dir)

    @property
    def sandbox_id(self) -> str:
        if self._sandbox_id is None or self._client is None:
            raise RuntimeError("the gym-sandboxd environment has not started (or has stopped)")
        return self._sandbox_id

    async def _build_image(self) -> tuple[str, list[dict[str, Any]]]:
        """The task's Dockerfile built on the daemon's provider by `gym image build --context`: its
        reference, and a Compose task's other services (their images built too) as the spec takes them."""
        command = [
            *shlex.split(self.options.gym_command),
            "image", "build", "--json",
            "--context", str(self.environment_dir.resolve()),
            "--name", self.environment_name,
            "--timeout-seconds", str(max(1, int(self.task_env_config.build_timeout_sec))),
        ]  # fmt: skip
        build_provider = self.options.build_provider or self.options.provider
        if build_provider is not None:
            command += ["--provider", build_provider]
        env = dict(os.environ)
        if self.options.state_dir is not None:
            env["GYM_STATE_DIR"] = self.options.state_dir
        lock = self._build_locks.setdefault(f"{self.environment_name}\0{self.environment_dir}", asyncio.Lock())
        async with lock:
            try:
                process = await asyncio.create_subprocess_exec(
                    *command, env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
                )
            except OSError as error:
                raise SandboxBuildFailedError(
                    f"cannot run `{self.options.gym_command}` to build {self.environment_dir / 'Dockerfile'}: {error} "
                    "(set --ek gym_command=... to the gym command)"
                ) from None
            try:
                stdout, stderr = await process.communicate()
            except BaseException:
                # Harbor's own build timeout (or a cancelled trial): the build goes with it.
                if process.returncode is None:
                    process.kill()
                    await process.wait()
                raise
        if process.returncode != 0:
            raise SandboxBuildFailedError(
                f"building {self.environment_dir / 'Dockerfile'} failed: {stderr.decode(errors='replace').strip()[-4000:]}"
            )
        built = json.loads(stdout.decode().strip().splitlines()[-1])
        return str(built["reference"]), list(built.get("services", []))

    def _spec(self, image: str, services: list[dict[str, Any]] | None = None) -> SandboxSpec:
        spec: dict[str, Any] = {"image": image, "labels": dict([SANDBOX_LABEL])}
        if services:
            spec["services"] = services
        if self.options.provider is not None:
            spec["provider"] = self.options.provider
        resources: dict[str, Any] = {}
        cpus = self._resource_limit_value("cpu", auto_mode=ResourceMode.LIMIT)
        memory_mb = self._resource_limit_value("memory", auto_mode=ResourceMode.LIMIT)
        if cpus is not None:
            resources["cpus"] = cpus
        if memory_mb is not None:
            resources["memoryMiB"] = memory_mb
        if self._effective_storage_mb is not None:
            resources["diskMiB"] = self._effective_storage_mb
        if resources:
            spec["resources"] = resources
        env = self._startup_env()
        if env:
            spec["env"] = env
        if self.task_env_config.workdir:
            spec["workdir"] = self.task_env_config.workdir
        mode, hosts = _egress_policy(self._network_policy)
        spec["network"] = "none" if mode == "none" else {"mode": mode, "allowedHosts": hosts}
        options = dict(self.options.provider_options)
        if self._host_mounts:
            binds = [{"hostPath": str(Path(m["source"]).resolve()), "path": str(m["target"])} for m in self._host_mounts]
            options["readOnlyBinds"] = [*options.get("readOnlyBinds", []), *binds]
        if options:
            spec["providerOptions"] = options
        if self.options.ttl_seconds is not None:
            spec["ttlSeconds"] = self.options.ttl_seconds
        return spec  # type: ignore[return-value]

    async def start(self, force_build: bool) -> None:
        use_prebuilt = should_use_prebuilt_docker_image(
            self.environment_dir, docker_image=self.task_env_config.docker_image, force_build=force_build
        )
        image, services = (
            (str(self.task_env_config.docker_image), []) if use_prebuilt else await self._build_image()
        )
        client = self._make_client()
        try:
            sandbox = await client.create_sandbox(self._spec(image, services))
        except ForbiddenByConfigError as error:
            await client.aclose()
            mode = self._network_policy.network_mode.value
            raise ForbiddenByConfigError(
                f"{error.message} (the {self.session_id} environment's network policy is {mode}; Harbor's default "
                "when a task declares no [environment] network_mode is public): the daemon's operator allows it, "
                "or the task declares less",
                details=error.details,
            ) from None
        except BaseException:
            await client.aclose()
            raise
        self._client, self._sandbox_id = client, sandbox["id"]
        self.logger.debug(f"gym-sandboxd sandbox {sandbox['id']} ({sandbox.get('provider')}) from {image}")
        await self._start_entrypoint(image)
        await self._upload_environment_dir_after_start()
        # Harbor's output folders, writable by the task's users (as its Docker environment makes them).
        await self.ensure_dirs(self._mount_targets(writable_only=True))

    async def _start_entrypoint(self, image: str) -> None:
        """The image's ENTRYPOINT, as Harbor's Docker environment runs it: with its keepalive
        (`sh -c "sleep infinity"`) in place of the image's CMD, so an entrypoint that starts services
        and then `exec "$@"`s keeps them up. The sandbox's own keeper is its first process here, so
        it runs in the background from the working directory (as `gym eval run` starts it)."""
        assert self._client is not None
        try:
            info = await self._client.inspect_image(image, provider=self.options.build_provider or self.options.provider)
        except CapabilityUnsupportedError:
            self.logger.debug(f"the provider cannot inspect {image}: its ENTRYPOINT, if any, is not started")
            return
        entrypoint = info.get("entrypoint") or []
        if not entrypoint:
            return
        command = f"{shlex.join([*entrypoint, 'sh', '-c', 'sleep infinity'])} </dev/null >/dev/null 2>&1 &"
        result = await self.exec(command, timeout_sec=ENTRYPOINT_START_TIMEOUT_SEC)
        if result.return_code != 0:
            raise RuntimeError(f"the image's ENTRYPOINT {entrypoint} could not be started (exit {result.return_code}): {result.stderr}")

    async def stop(self, delete: bool) -> None:
        client, sandbox_id = self._client, self._sandbox_id
        if client is None or sandbox_id is None:
            return
        self._client = self._sandbox_id = None
        try:
            if delete:
                await client.delete_sandbox(sandbox_id)
            else:
                self.logger.info(f"gym-sandboxd sandbox {sandbox_id} kept until its lease ends (gym sandbox rm {sandbox_id})")
        finally:
            await client.aclose()

    async def exec(
        self,
        command: str,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_sec: int | None = None,
        user: str | int | None = None,
    ) -> ExecResult:
        sandbox_id = self.sandbox_id
        assert self._client is not None
        resolved_user = self._resolve_user(user)
        keywords: dict[str, Any] = {
            "cwd": cwd or self.task_env_config.workdir or None,
            "env": self._merge_env(env),
            "timeout_ms": min(int(timeout_sec * 1000), MAX_EXEC_TIMEOUT_MS) if timeout_sec else MAX_EXEC_TIMEOUT_MS,
            "max_output_bytes": MAX_OUTPUT_BYTES,
            "user": None if resolved_user is None else str(resolved_user),
        }
        argv = [*_SHELL, command]
        callback = self._output_callback()
        # Always streamed: when Harbor cancels this call (an agent past its timeout_sec, a trial
        # cancelled) the connection closes and the daemon kills the command with everything it
        # started, as at a timeout; a plain exec would run on into the verifier's phase.
        async with self._client.exec_stream(sandbox_id, argv, **keywords) as events:
            async for event in events:
                if event["type"] in ("stdout", "stderr"):
                    if callback is not None:
                        await callback(event["data"], event["type"])  # type: ignore[typeddict-item, arg-type]
                elif event["type"] == "result":
                    return _result(dict(event["result"]), timeout_sec)  # type: ignore[typeddict-item]
                elif event["type"] == "error":
                    error = event["error"]  # type: ignore[typeddict-item]
                    raise RuntimeError(f"{error['code']}: {error['message']}")
        raise RuntimeError("the daemon ended the command's stream without its result")

    async def upload_file(self, source_path: Path | str, target_path: str) -> None:
        sandbox_id = self.sandbox_id
        assert self._client is not None
        mode = Path(source_path).stat().st_mode & 0o777
        await self._client.write_file(sandbox_id, target_path, Path(source_path), mode=mode)

    async def upload_dir(self, source_dir: Path | str, target_dir: str) -> None:
        sandbox_id = self.sandbox_id
        assert self._client is not None
        await self._client.upload_directory(sandbox_id, source_dir, target_dir)

    async def download_file(self, source_path: str, target_path: Path | str) -> None:
        sandbox_id = self.sandbox_id
        assert self._client is not None
        await self._client.download_file(sandbox_id, source_path, target_path)

    async def download_dir(self, source_dir: str, target_dir: Path | str) -> None:
        sandbox_id = self.sandbox_id
        assert self._client is not None
        Path(target_dir).mkdir(parents=True, exist_ok=True)
        await self._client.download_directory(sandbox_id, source_dir, target_dir)

    async def _apply_network_policy(self, network_policy: NetworkPolicy) -> None:
        sandbox_id = self.sandbox_id
        assert self._client is not None
        mode, hosts = _egress_policy(network_policy)
        await self._client.set_network(sandbox_id, mode, hosts)
