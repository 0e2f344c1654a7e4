"""A mini-SWE-agent (2.x) environment on the gym-sandboxd daemon.

mini-SWE-agent selects it by its dotted path (``environment_class:
gym_sandboxd.mini_swe_agent.GymSandboxdEnvironment`` in its config, or ``--environment-class``);
the rest of its ``environment:`` mapping is this class's keywords (:class:`GymSandboxdEnvironmentConfig`).
It behaves as mini-SWE-agent's own Docker environment does (tested against 2.4.6): each
``execute`` runs ``interpreter + [command]`` in a fresh process of one sandbox, stdout and stderr
merged in the order written, and answers ``{"output", "returncode", "exception_info"}`` (plus
``"extra"`` when the command could not finish); a first output line
``COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT`` with return code 0 raises mini-SWE-agent's ``Submitted``
with the rest of the output as the submission. Where it differs, on purpose: a command past its
timeout is killed with everything it started (mini-SWE-agent's Docker environment leaves it
running in the container), and the sandbox is the daemon's (any backend, pools, leases), so it
is destroyed on ``close()``, when the object is collected and at interpreter exit, and by the
daemon's reaper when its lease runs out if this process dies without either.

Importing this module never needs mini-SWE-agent; ``Submitted`` is looked up when a command
submits, and a stand-in with the same ``messages`` is raised where mini-SWE-agent is absent.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .client import GymClient
from .schema import ExecResult, SandboxSpec

__all__ = ["GymSandboxdEnvironment", "GymSandboxdEnvironmentConfig", "SUBMIT_SENTINEL"]

SUBMIT_SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
# A label on every sandbox this environment makes, to find them (`gym sandbox ls -l mini-swe-agent=1`).
SANDBOX_LABEL = ("mini-swe-agent", "1")
# The session commands go through with `session: true`: each runs in a subshell of its own, as a
# one-shot exec would, in a fraction of a millisecond instead of tens (a provider without sessions
# runs them one-shot). Off by default: a timed-out session command answers none of its output
# (measured on Docker), where mini-SWE-agent shows what a timed-out command printed, and a model
# call takes seconds anyway.
SESSION_NAME = "mini-swe-agent"
# Runs the interpreter with its stderr on its stdout, so output keeps the order it was written in,
# as mini-SWE-agent's own environments give it (their subprocesses have stderr=STDOUT).
_MERGE_STDERR = ["sh", "-c", 'exec "$@" 2>&1', "sh"]
# Keys of mini-SWE-agent's Docker environment that have no meaning here, with what to use instead:
# refused by name rather than ignored, so a config moved over from `docker` does not silently lose
# a flag such as `--gpus` or `--network`.
_DOCKER_ONLY_KEYS = {
    "executable": "the daemon runs the sandbox; choose its backend with `provider`",
    "run_args": "the sandbox is made from `resources`, `network`, `user` and `provider_options`",
    "container_timeout": "the sandbox lives while it is used; `ttl_seconds` is its lease",
    "pull_timeout": "the daemon pulls or builds the image itself",
}
# Configuration that never reaches the model's prompt or the trajectory file.
_SECRET_KEYS = frozenset({"token"})
_UNAME_FIELDS = ("system", "node", "release", "version", "machine")


class _SubmittedStandIn(Exception):
    """Raised for a submission where mini-SWE-agent is not installed (same ``messages`` as its ``Submitted``)."""

    def __init__(self, *messages: dict[str, Any]) -> None:
        self.messages = messages
        super().__init__()


def _submitted_class() -> type[Exception]:
    try:
        from minisweagent.exceptions import Submitted
    except ImportError:
        return _SubmittedStandIn
    return Submitted


@dataclass
class GymSandboxdEnvironmentConfig:
    """The keywords of :class:`GymSandboxdEnvironment` (mini-SWE-agent's ``environment:`` mapping).

    The sandbox: ``image`` (required unless ``pool``), or ``pool`` to acquire a ready one from a
    warm pool; ``provider`` (the daemon's backend: docker, kubernetes, apptainer, enroot, ...),
    ``provider_options``, ``resources`` (``cpus``, ``memoryMiB``, ``pidsLimit``, ``diskMiB``),
    ``network`` (``none`` unless set: the daemon's default), ``user``, ``labels``,
    ``ttl_seconds`` (its lease, renewed by every command; default the daemon's, one hour).

    Commands: ``cwd`` ("/", also the sandbox's workdir), ``env`` (set for every command),
    ``forward_env`` (names of this process's variables passed to every command when set; ``env``
    wins), ``timeout`` (30 s, a command's when ``execute`` gives none), ``interpreter``
    (``["bash", "-lc"]``; the command is its last argument), ``session`` (false; true: commands
    go through the sandbox's session shell, faster, but a timed-out one answers no output), ``max_output_bytes`` (per command; default the daemon's
    1 MiB, beyond which head and tail are kept).

    The daemon: ``url`` / ``socket`` / ``token`` / ``state_dir``, default as the ``gym`` CLI finds
    it (``GYM_STATE_DIR``, else ``~/.local/state/gym``). ``token`` is never serialized.
    """

    image: str | None = None
    pool: str | None = None
    provider: str | None = None
    provider_options: dict[str, Any] = field(default_factory=dict)
    resources: dict[str, Any] = field(default_factory=dict)
    network: Any = None
    user: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    ttl_seconds: int | None = None
    cwd: str = "/"
    env: dict[str, str] = field(default_factory=dict)
    forward_env: list[str] = field(default_factory=list)
    timeout: float = 30
    interpreter: list[str] = field(default_factory=lambda: ["bash", "-lc"])
    session: bool = False
    max_output_bytes: int | None = None
    url: str | None = None
    socket: str | None = None
    token: str | None = None
    state_dir: str | None = None

    def __post_init__(self) -> None:
        if (self.image is None) == (self.pool is None):
            raise ValueError("GymSandboxdEnvironment needs exactly one of `image` or `pool`")
        if self.pool is not None:
            given = [key for key in ("provider", "user", "network") if getattr(self, key) is not None]
            given += [key for key in ("provider_options", "resources") if getattr(self, key)]
            if given:
                raise ValueError(f"{', '.join(given)} belong to the pool's spec; a sandbox acquired from `pool` takes them from it")
        if not isinstance(self.timeout, (int, float)) or isinstance(self.timeout, bool) or self.timeout <= 0:
            raise ValueError(f"`timeout` must be a number of seconds > 0, not {self.timeout!r}")
        if not self.interpreter:
            raise ValueError("`interpreter` must name a program (e.g. ['bash', '-lc'])")
        if not self.cwd.startswith("/"):
            raise ValueError(f"`cwd` must be an absolute path in the sandbox, not {self.cwd!r}")

    def model_dump(self, mode: str = "python") -> dict[str, Any]:
        """The configuration as a dict, without secrets (as mini-SWE-agent's pydantic configs dump theirs)."""
        data = dataclasses.asdict(self)
        for key in _SECRET_KEYS:
            data.pop(key, None)
        return data

    @classmethod
    def from_keywords(cls, keywords: Mapping[str, Any]) -> GymSandboxdEnvironmentConfig:
        known = {item.name for item in dataclasses.fields(cls)}
        for key in keywords:
            if key in _DOCKER_ONLY_KEYS:
                raise ValueError(f"GymSandboxdEnvironment does not take `{key}`: {_DOCKER_ONLY_KEYS[key]}")
            if key not in known:
                raise ValueError(f"GymSandboxdEnvironment does not take `{key}` (it takes: {', '.join(sorted(known))})")
        return cls(**keywords)


def _destroy(client: GymClient, sandbox_id: str, logger: logging.Logger) -> None:
    """Destroys the sandbox and closes the client; for ``weakref.finalize``, so it holds no environment."""
    try:
        client.delete_sandbox(sandbox_id)
    except Exception as error:  # noqa: BLE001 - clean-up must not raise; the lease reaps what is left
        logger.warning("could not destroy sandbox %s (its lease will reap it): %s", sandbox_id, error)
    finally:
        client.close()


def _failure(output: str, exception_type: str, message: str) -> dict[str, Any]:
    """The result of a command that could not finish, worded as mini-SWE-agent's environments word theirs."""
    return {
        "output": output,
        "returncode": -1,
        "exception_info": f"An error occurred while executing the command: {message}",
        "extra": {"exception_type": exception_type, "exception": message},
    }


def _observation(result: ExecResult, command: str, timeout_s: float) -> dict[str, Any]:
    output = result["stdout"] + result["stderr"]
    status = result["status"]
    if status == "ok" and result["exitCode"] is not None:
        return {"output": output, "returncode": result["exitCode"], "exception_info": ""}
    if status == "timeout":
        # The words subprocess's TimeoutExpired has, which mini-SWE-agent's environments report.
        message = str(subprocess.TimeoutExpired(command, timeout_s))
        return _failure(output, "TimeoutExpired", message + " (the command and every process it started were killed)")
    reasons = {
        "oom": "the command ran out of memory and was killed",
        "killed": "the command was killed",
        "sandbox_gone": "the sandbox is gone",
    }
    message = reasons.get(status, f"the command ended with status {status}")
    if "reason" in result:
        message += f" ({result['reason']})"
    return _failure(output, f"exec:{status}", message)


class GymSandboxdEnvironment:
    """mini-SWE-agent's ``Environment`` in one sandbox of the gym-sandboxd daemon.

    The sandbox is made (or acquired from ``pool``) by the constructor, which answers once it is
    ready and raises the daemon's error (:class:`~gym_sandboxd.errors.GymError`) when it cannot.
    """

    def __init__(
        self,
        *,
        config_class: type = GymSandboxdEnvironmentConfig,
        logger: logging.Logger | None = None,
        client: GymClient | None = None,
        **kwargs: Any,
    ) -> None:
        self.logger = logger or logging.getLogger("minisweagent.environment")
        self.config = config_class.from_keywords(kwargs)
        config = self.config
        self._client = client or GymClient(url=config.url, socket=config.socket, token=config.token, state_dir=config.state_dir)
        self._uname: dict[str, str] | None = None
        labels = {**config.labels, SANDBOX_LABEL[0]: SANDBOX_LABEL[1]}
        try:
            if config.pool is not None:
                sandbox = self._client.acquire(config.pool, labels=labels, ttl_seconds=config.ttl_seconds)
            else:
                sandbox = self._client.create_sandbox(self._spec(labels))
        except BaseException:
            self._client.close()
            raise
        self.sandbox_id: str = sandbox["id"]
        self.logger.info("sandbox %s ready (%s)", self.sandbox_id, sandbox["provider"])
        self._finalizer = weakref.finalize(self, _destroy, self._client, self.sandbox_id, self.logger)

    def _spec(self, labels: dict[str, str]) -> SandboxSpec:
        config = self.config
        spec: dict[str, Any] = {"image": config.image, "workdir": config.cwd, "labels": labels}
        optional = {
            "provider": config.provider,
            "user": config.user,
            "network": config.network,
            "ttlSeconds": config.ttl_seconds,
            "resources": config.resources or None,
            "providerOptions": config.provider_options or None,
        }
        spec.update({key: value for key, value in optional.items() if value is not None})
        return spec  # type: ignore[return-value]

    def _command_env(self) -> dict[str, str]:
        forwarded = {name: value for name in self.config.forward_env if (value := os.environ.get(name)) is not None}
        return {**forwarded, **self.config.env}

    def execute(self, action: dict, cwd: str = "", *, timeout: float | None = None) -> dict[str, Any]:
        """Runs ``action["command"]``; a non-zero exit is a result, a command that could not finish
        is return code -1 with ``exception_info``. Raises ``Submitted`` on a submission."""
        command = action.get("command", "")
        timeout_s = timeout or self.config.timeout
        if not self._finalizer.alive:
            output = _failure("", "RuntimeError", f"the environment is closed (sandbox {self.sandbox_id} destroyed)")
        else:
            try:
                result = self._client.exec(
                    self.sandbox_id,
                    [*_MERGE_STDERR, *self.config.interpreter, command],
                    session=SESSION_NAME if self.config.session else None,
                    cwd=cwd or self.config.cwd,
                    env=self._command_env(),
                    timeout_ms=max(1, round(timeout_s * 1000)),
                    max_output_bytes=self.config.max_output_bytes,
                )
                output = _observation(result, command, timeout_s)
            except Exception as error:  # noqa: BLE001 - mini-SWE-agent's contract: the agent sees it
                output = _failure("", type(error).__name__, str(error))
        self._check_finished(output)
        return output

    def _check_finished(self, output: dict[str, Any]) -> None:
        lines = output.get("output", "").lstrip().splitlines(keepends=True)
        if not lines or lines[0].strip() != SUBMIT_SENTINEL or output["returncode"] != 0:
            return
        submission = "".join(lines[1:])
        raise _submitted_class()(
            {"role": "exit", "content": submission, "extra": {"exit_status": "Submitted", "submission": submission}}
        )

    def _sandbox_uname(self) -> dict[str, str]:
        """The sandbox's ``uname`` (what the model's commands run on), read once; empty where it has none."""
        if self._uname is None:
            self._uname = {name: "" for name in _UNAME_FIELDS} | {"processor": ""}
            script = "uname -s; uname -n; uname -r; uname -v; uname -m"
            try:
                result = self._client.exec(self.sandbox_id, ["sh", "-c", script], timeout_ms=10_000)
            except Exception as error:  # noqa: BLE001 - the prompt then says nothing of the system
                self.logger.warning("could not read the sandbox's uname: %s", error)
                return self._uname
            lines = result["stdout"].splitlines()
            if result["exitCode"] == 0 and len(lines) == len(_UNAME_FIELDS):
                self._uname.update(zip(_UNAME_FIELDS, lines, strict=True))
        return self._uname

    def get_template_vars(self, **kwargs: Any) -> dict[str, Any]:
        """The configuration (no token), the sandbox's uname (``system``, ``release``, ``machine``, ...), then ``kwargs``."""
        return {**self.config.model_dump(), **self._sandbox_uname(), "sandbox_id": self.sandbox_id, **kwargs}

    def serialize(self) -> dict[str, Any]:
        return {
            "info": {
                "config": {
                    "environment": self.config.model_dump(mode="json"),
                    "environment_type": f"{type(self).__module__}.{type(self).__name__}",
                    "sandbox_id": self.sandbox_id,
                }
            }
        }

    def close(self) -> None:
        """Destroys the sandbox (idempotent); later commands answer that the environment is closed."""
        self._finalizer()

    # mini-SWE-agent's own environments call it `cleanup`.
    cleanup = close
    stop = close

    def __enter__(self) -> GymSandboxdEnvironment:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"GymSandboxdEnvironment(sandbox_id={getattr(self, 'sandbox_id', None)!r}, image={self.config.image!r})"
