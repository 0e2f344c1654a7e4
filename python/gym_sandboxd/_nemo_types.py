"""NeMo Gym's sandbox types: imported from NeMo Gym when it is installed, else compatible ones.

The provider must hand NeMo Gym its own classes (its facade checks ``isinstance`` on results and
catches its own ``SandboxCreateError``), so NeMo Gym's are used whenever they import. Without
NeMo Gym the package still imports and the provider still works with these: same names, fields,
defaults and checks as NeMo Gym's documented protocol (``nemo_gym.sandbox.providers.base``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any
from urllib.parse import urlsplit

try:
    from nemo_gym.sandbox.providers.base import (  # type: ignore[import-not-found]
        SandboxCreateError,
        SandboxCreateVerificationError,
        SandboxExecResult,
        SandboxHandle,
        SandboxResources,
        SandboxSpec,
        SandboxStatus,
    )

    HAS_NEMO_GYM = True
except ImportError:
    HAS_NEMO_GYM = False

    class SandboxStatus(str, Enum):  # type: ignore[no-redef]
        STARTING = "starting"
        RUNNING = "running"
        STOPPED = "stopped"
        ERROR = "error"
        UNKNOWN = "unknown"

    class SandboxCreateError(RuntimeError):  # type: ignore[no-redef]
        """A sandbox could not be created."""

    class SandboxCreateVerificationError(SandboxCreateError):  # type: ignore[no-redef]
        """A sandbox was created but never passed its readiness check."""

    @dataclass(frozen=True)
    class SandboxResources:  # type: ignore[no-redef]
        cpu: float | None = None
        memory_mib: int | None = None
        disk_gib: int | None = None
        gpu: int | None = None
        gpu_type: str | None = None

        @classmethod
        def from_mapping(cls, resources: Mapping[str, Any] | None) -> SandboxResources:
            if resources is None:
                return cls()
            known = {"cpu", "memory_mib", "disk_gib", "gpu", "gpu_type"}
            unknown = sorted(set(resources) - known)
            if unknown:
                raise ValueError(f"Unknown sandbox resource keys: {', '.join(unknown)}; known: {', '.join(sorted(known))}")

            def number(key: str, kind: type) -> Any:
                value = resources.get(key)
                return None if value is None else kind(value)

            return cls(number("cpu", float), number("memory_mib", int), number("disk_gib", int), number("gpu", int), number("gpu_type", str))

    @dataclass(frozen=True)
    class SandboxSpec:  # type: ignore[no-redef]
        image: str | None = None
        ttl_s: int | float | None = None
        ready_timeout_s: int | float | None = None
        workdir: str | None = None
        env: dict[str, str] = field(default_factory=dict)
        files: dict[str, str] = field(default_factory=dict)
        metadata: dict[str, str] = field(default_factory=dict)
        resources: Any = field(default_factory=SandboxResources)
        entrypoint: list[str] | None = None
        provider_options: dict[str, Any] = field(default_factory=dict)
        ports: tuple[int, ...] | list[int] = field(default_factory=tuple)

        def __post_init__(self) -> None:
            if not isinstance(self.resources, SandboxResources):
                object.__setattr__(self, "resources", SandboxResources.from_mapping(self.resources))
            if not isinstance(self.ports, (list, tuple)):
                raise TypeError("Sandbox ports must be a list or tuple of TCP port numbers")
            ports: list[int] = []
            for value in self.ports:
                if isinstance(value, bool) or not isinstance(value, (int, str)):
                    raise ValueError(f"Invalid sandbox TCP port: {value!r}")
                port = int(value)
                if not 1 <= port <= 65535 or port in ports:
                    raise ValueError(f"Invalid or repeated sandbox TCP port: {value!r}")
                ports.append(port)
            object.__setattr__(self, "ports", tuple(ports))

    @dataclass
    class SandboxHandle:  # type: ignore[no-redef]
        sandbox_id: str
        provider_name: str
        raw: Any

    @dataclass(frozen=True)
    class SandboxExecResult:  # type: ignore[no-redef]
        stdout: str | None
        stderr: str | None
        return_code: int
        error_type: str | None = None


# NeMo Gym 0.5 added SandboxEndpoint (with ports and endpoints); 0.4 has the rest.
try:
    from nemo_gym.sandbox.providers.base import SandboxEndpoint  # type: ignore[import-not-found]
except ImportError:

    @dataclass(frozen=True)
    class SandboxEndpoint:  # type: ignore[no-redef]
        endpoint: str
        headers: dict[str, str] = field(default_factory=dict)

        def __post_init__(self) -> None:
            parts = urlsplit(self.endpoint.strip() if isinstance(self.endpoint, str) else "")
            if not parts.scheme or not parts.netloc:
                raise ValueError("Sandbox endpoint must be a non-empty absolute URL")
            object.__setattr__(self, "endpoint", self.endpoint.strip())
            object.__setattr__(self, "headers", {str(key): str(value) for key, value in dict(self.headers).items()})


__all__ = [
    "HAS_NEMO_GYM",
    "SandboxCreateError",
    "SandboxCreateVerificationError",
    "SandboxEndpoint",
    "SandboxExecResult",
    "SandboxHandle",
    "SandboxResources",
    "SandboxSpec",
    "SandboxStatus",
]
