"""Stand-in of ``nemo_gym.sandbox.providers.base`` (see ``nemo_gym/__init__.py``).

The protocol as NeMo Gym documents it: dataclasses with its field names and defaults, its two
create errors, and the optional capabilities as runtime-checkable protocols (a provider has one
when it has the method).
"""

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import urlsplit


class SandboxStatus(str, Enum):
    STARTING = "starting"
    RUNNING = "running"
    STOPPED = "stopped"
    ERROR = "error"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class SandboxEndpoint:
    """An absolute URL to a service, and the headers it needs."""

    endpoint: str
    headers: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        text = self.endpoint.strip() if isinstance(self.endpoint, str) else ""
        parts = urlsplit(text)
        if not (parts.scheme and parts.netloc):
            raise ValueError("Sandbox endpoint must be a non-empty absolute URL")
        object.__setattr__(self, "endpoint", text)
        object.__setattr__(self, "headers", {str(k): str(v) for k, v in dict(self.headers).items()})


@dataclass(frozen=True)
class SandboxResources:
    cpu: float | None = None
    memory_mib: int | None = None
    disk_gib: int | None = None
    gpu: int | None = None
    gpu_type: str | None = None

    @classmethod
    def from_mapping(cls, resources: Mapping[str, Any] | None) -> "SandboxResources":
        if resources is None:
            return cls()
        names = {item.name for item in fields(cls)}
        extra = set(resources) - names
        if extra:
            raise ValueError(f"Unknown sandbox resource keys: {', '.join(sorted(extra))}")
        casts = {"cpu": float, "memory_mib": int, "disk_gib": int, "gpu": int, "gpu_type": str}
        return cls(**{name: None if resources.get(name) is None else casts[name](resources[name]) for name in names})


@dataclass(frozen=True)
class SandboxSpec:
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
    ports: Any = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not isinstance(self.resources, SandboxResources):
            object.__setattr__(self, "resources", SandboxResources.from_mapping(self.resources))
        if not isinstance(self.ports, (list, tuple)):
            raise TypeError("Sandbox ports must be a list or tuple of TCP port numbers")
        seen: list[int] = []
        for raw in self.ports:
            if isinstance(raw, bool) or not isinstance(raw, (int, str)):
                raise ValueError(f"Invalid sandbox TCP port: {raw!r}")
            port = int(raw)
            if not 1 <= port <= 65535 or port in seen:
                raise ValueError(f"Invalid sandbox TCP port: {raw!r}")
            seen.append(port)
        object.__setattr__(self, "ports", tuple(seen))


@dataclass
class SandboxHandle:
    sandbox_id: str
    provider_name: str
    raw: Any


@dataclass(frozen=True)
class SandboxExecResult:
    stdout: str | None
    stderr: str | None
    return_code: int
    error_type: str | None = None


ExecResult = SandboxExecResult


@dataclass(frozen=True)
class SandboxPtySpec:
    command: str | None = None
    cwd: str | None = None
    env: dict[str, str] | None = None
    rows: int = 24
    cols: int = 80
    user: str | int | None = None
    pty: bool = True


class SandboxCreateError(RuntimeError):
    pass


class SandboxCreateVerificationError(SandboxCreateError):
    pass


class SandboxProvider(Protocol):
    name: str

    async def create(self, spec: SandboxSpec) -> SandboxHandle: ...

    async def exec(
        self,
        handle: SandboxHandle,
        command: str,
        *,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout_s: int | float | None = None,
        user: str | int | None = None,
    ) -> SandboxExecResult: ...

    async def upload_file(self, handle: SandboxHandle, source_path: Path, target_path: str) -> None: ...

    async def download_file(self, handle: SandboxHandle, source_path: str, target_path: Path) -> None: ...

    async def status(self, handle: SandboxHandle) -> SandboxStatus: ...

    async def close(self, handle: SandboxHandle) -> None: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class SupportsSandboxEndpoint(Protocol):
    async def endpoint(self, handle: SandboxHandle, port: int) -> SandboxEndpoint: ...


@runtime_checkable
class SupportsSandboxPty(Protocol):
    async def create_pty(self, handle: SandboxHandle, spec: SandboxPtySpec) -> Any: ...


@runtime_checkable
class ConnectableProvider(Protocol):
    async def serialize_handle(self, handle: SandboxHandle, *, scope: str | None = None) -> dict[str, Any]: ...

    async def connect(self, descriptor: Mapping[str, Any]) -> SandboxHandle: ...
