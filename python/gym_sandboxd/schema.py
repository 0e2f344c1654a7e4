"""The daemon API's request and answer shapes, generated from its /openapi.json.

Do not edit: run ``python3 -m gym_sandboxd.schema_gen > gym_sandboxd/schema.py`` against a
daemon of the version you target (a test compares this file with a real daemon's document).
"""

# ruff: noqa: E501
from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict

ErrorCode = Literal["VALIDATION_FAILED", "FORBIDDEN_BY_CONFIG", "UNAUTHORIZED", "ACCESS_DENIED", "SANDBOX_NOT_FOUND", "IMAGE_NOT_FOUND", "FILE_NOT_FOUND", "PROVIDER_NOT_FOUND", "PROVIDER_INVALID", "SANDBOX_NOT_READY", "ARCHIVE_UNSAFE", "PATH_KIND_MISMATCH", "SANDBOX_START_FAILED", "CAPABILITY_UNSUPPORTED", "PROVIDER_UNAVAILABLE", "PROVIDER_ERROR", "PROVIDER_TIMEOUT", "POOL_EXHAUSTED", "HARNESS_NOT_FOUND", "MODEL_UPSTREAM_ERROR", "MODEL_RATE_LIMITED", "ROLLOUT_NOT_FOUND", "ROLLOUT_CONFLICT", "GATEWAY_LOOP", "POOL_NOT_FOUND", "SNAPSHOT_NOT_FOUND", "SNAPSHOT_TOO_LARGE", "CAPACITY_EXCEEDED", "ROUTE_NOT_FOUND", "PAYLOAD_TOO_LARGE", "FILE_TOO_LARGE", "PTY_NOT_FOUND", "PTY_HELD", "PTY_DETACHED", "PTY_LIMIT_REACHED", "IDEMPOTENCY_KEY_MISMATCH", "IDEMPOTENT_OUTCOME_UNKNOWN", "DAEMON_CONFLICT", "DAEMON_UNAVAILABLE", "SHUTTING_DOWN", "SERVICE_UNHEALTHY", "INTERNAL"]
ExecStatus = Literal["ok", "timeout", "killed", "oom", "sandbox_gone"]
NetworkMode = Literal["none", "host", "bridge"]
SandboxState = Literal["creating", "ready", "destroying", "gone", "failed", "unreachable"]


class ErrorBodyError(TypedDict):
    code: ErrorCode
    message: str
    details: dict[str, Any]


class ErrorBody(TypedDict):
    error: ErrorBodyError


class SandboxSpecResources(TypedDict):
    cpus: NotRequired[float]
    memoryMiB: NotRequired[int]
    pidsLimit: NotRequired[int]
    diskMiB: NotRequired[int]
    gpus: NotRequired[int]


class SandboxSpecNetwork1(TypedDict):
    mode: Literal["none", "allowlist", "public"]
    allowedHosts: NotRequired[list[str]]


class SandboxSpecFilesItem(TypedDict):
    path: str
    content: str
    encoding: NotRequired[Literal["utf8", "base64"]]
    mode: NotRequired[int]


class SandboxSpecReadiness(TypedDict):
    argv: NotRequired[list[str]]
    command: NotRequired[str]
    timeoutMs: NotRequired[int]
    intervalMs: NotRequired[int]


class SandboxSpecHealthcheck(TypedDict):
    test: str | list[str]
    intervalMs: NotRequired[int]
    timeoutMs: NotRequired[int]
    retries: NotRequired[int]
    startPeriodMs: NotRequired[int]
    startIntervalMs: NotRequired[int]


class SandboxSpecServicesItemHealthcheck(TypedDict):
    argv: list[str]
    intervalMs: NotRequired[int]
    timeoutMs: NotRequired[int]
    startPeriodMs: NotRequired[int]
    retries: NotRequired[int]


class SandboxSpecServicesItemDependsOnItem(TypedDict):
    service: str
    condition: Literal["started", "healthy"]


class SandboxSpecServicesItem(TypedDict):
    name: str
    image: str
    entrypoint: NotRequired[list[str]]
    command: NotRequired[list[str]]
    env: NotRequired[dict[str, str]]
    workdir: NotRequired[str]
    user: NotRequired[str]
    healthcheck: NotRequired[SandboxSpecServicesItemHealthcheck]
    dependsOn: NotRequired[list[SandboxSpecServicesItemDependsOnItem]]


class SandboxSpec(TypedDict):
    image: str
    provider: NotRequired[str]
    resources: NotRequired[SandboxSpecResources]
    env: NotRequired[dict[str, str]]
    workdir: NotRequired[str]
    user: NotRequired[str]
    network: NotRequired[NetworkMode | SandboxSpecNetwork1]
    ttlSeconds: NotRequired[int]
    labels: NotRequired[dict[str, str]]
    files: NotRequired[list[SandboxSpecFilesItem]]
    readiness: NotRequired[SandboxSpecReadiness]
    ports: NotRequired[list[int]]
    entrypoint: NotRequired[Literal["image"] | list[str]]
    healthcheck: NotRequired[SandboxSpecHealthcheck]
    services: NotRequired[list[SandboxSpecServicesItem]]
    providerOptions: NotRequired[dict[str, Any]]


class PoolAcquireRequest(TypedDict):
    pool: str
    env: NotRequired[dict[str, str]]
    labels: NotRequired[dict[str, str]]
    ttlSeconds: NotRequired[int]


class SandboxSpecFilesItemOutput(TypedDict):
    path: str
    content: str
    encoding: Literal["utf8", "base64"]
    mode: int


class SandboxSpecReadinessOutput(TypedDict):
    argv: NotRequired[list[str]]
    command: NotRequired[str]
    timeoutMs: int
    intervalMs: int


class SandboxSpecHealthcheckOutput(TypedDict):
    test: str | list[str]
    intervalMs: int
    timeoutMs: int
    retries: int
    startPeriodMs: int
    startIntervalMs: int


class SandboxSpecServicesItemHealthcheckOutput(TypedDict):
    argv: list[str]
    intervalMs: int
    timeoutMs: int
    startPeriodMs: int
    retries: int


class SandboxSpecServicesItemOutput(TypedDict):
    name: str
    image: str
    entrypoint: NotRequired[list[str]]
    command: NotRequired[list[str]]
    env: dict[str, str]
    workdir: NotRequired[str]
    user: NotRequired[str]
    healthcheck: NotRequired[SandboxSpecServicesItemHealthcheckOutput]
    dependsOn: list[SandboxSpecServicesItemDependsOnItem]


class SandboxSpecOutput(TypedDict):
    image: str
    provider: NotRequired[str]
    resources: SandboxSpecResources
    env: dict[str, str]
    workdir: NotRequired[str]
    user: NotRequired[str]
    network: NetworkMode
    ttlSeconds: int
    labels: dict[str, str]
    files: list[SandboxSpecFilesItemOutput]
    readiness: NotRequired[SandboxSpecReadinessOutput]
    ports: list[int]
    entrypoint: NotRequired[Literal["image"] | list[str]]
    healthcheck: NotRequired[SandboxSpecHealthcheckOutput]
    services: NotRequired[list[SandboxSpecServicesItemOutput]]
    providerOptions: dict[str, Any]


class SandboxLineage0(TypedDict):
    parent: str
    snapshot: str
    forkIndex: int


class SandboxServiceExit(TypedDict):
    status: str
    exitCode: int | None


class SandboxServiceHealth(TypedDict):
    failingStreak: int
    lastExitCode: int | None
    lastOutput: str


class SandboxService(TypedDict):
    state: Literal["starting", "healthy", "running", "unhealthy", "exited"]
    argv: list[str]
    startedAt: str
    endedAt: NotRequired[str]
    exit: NotRequired[SandboxServiceExit]
    health: NotRequired[SandboxServiceHealth]


class Sandbox(TypedDict):
    id: str
    provider: str
    state: SandboxState
    image: str
    labels: dict[str, str]
    pool: str | None
    createdAt: str
    leaseExpiresAt: str
    deadlineAt: str
    fromPool: bool
    spec: SandboxSpecOutput
    lineage: SandboxLineage0 | None
    service: NotRequired[SandboxService]


class SandboxList(TypedDict):
    sandboxes: list[Sandbox]


class KeepaliveRequest(TypedDict):
    ttlSeconds: NotRequired[int]


class ExecRequest(TypedDict):
    argv: NotRequired[list[str]]
    command: NotRequired[str]
    cwd: NotRequired[str]
    env: NotRequired[dict[str, str]]
    stdin: NotRequired[str]
    stdinEncoding: NotRequired[Literal["utf8", "base64"]]
    timeoutMs: NotRequired[int]
    maxOutputBytes: NotRequired[int]
    session: NotRequired[str]
    user: NotRequired[str]


class ExecResult(TypedDict):
    status: ExecStatus
    exitCode: int | None
    stdout: str
    stderr: str
    stdoutTruncated: bool
    stderrTruncated: bool
    stdoutBytes: int
    stderrBytes: int
    durationMs: float
    session: NotRequired[Literal[False]]
    sandboxLost: NotRequired[Literal[True]]
    reason: NotRequired[str]


class ExecStreamEventStdout(TypedDict):
    type: Literal["stdout"]
    data: str


class ExecStreamEventStderr(TypedDict):
    type: Literal["stderr"]
    data: str


class ExecStreamEventResult(TypedDict):
    type: Literal["result"]
    result: dict[str, Any]


class ExecStreamEventError(TypedDict):
    type: Literal["error"]
    error: ErrorBodyError


class GatewayReach(TypedDict):
    url: str


class PortEndpoint(TypedDict):
    port: int
    path: str
    headers: dict[str, str]


class ServiceOutput(TypedDict):
    stdout: str
    stderr: str
    droppedStdoutBytes: int
    droppedStderrBytes: int


class OpenRolloutRequestUpstream(TypedDict):
    baseUrl: str
    apiKey: NotRequired[str]
    model: NotRequired[str]
    api: NotRequired[Literal["openai", "anthropic"]]
    requestTokenIds: NotRequired[bool]


class OpenRolloutRequest(TypedDict):
    rolloutId: NotRequired[str]
    upstream: NotRequired[OpenRolloutRequestUpstream]
    sandboxId: NotRequired[str]


class PoolDefinition(TypedDict):
    spec: SandboxSpec
    minIdle: NotRequired[int]
    maxIdle: NotRequired[int]
    maxTotal: NotRequired[int]
    idleTtlSeconds: NotRequired[int]
    refillConcurrency: NotRequired[int]


class PoolStatsAcquireLatencyMs(TypedDict):
    count: int
    p50: float
    p99: float
    hitP50: float
    missP50: float


class PoolStats(TypedDict):
    name: str
    definition: dict[str, Any]
    idle: int
    leased: int
    creating: int
    hits: int
    misses: int
    failures: int
    discarded: int
    rotated: int
    acquireLatencyMs: PoolStatsAcquireLatencyMs
    lastError: str | None


class StopProcessesResult(TypedDict):
    killed: int
    sandboxLost: NotRequired[Literal[True]]
    reason: NotRequired[str]


class SnapshotRequest(TypedDict):
    image: NotRequired[str]
    ttlSeconds: NotRequired[int]
    labels: NotRequired[dict[str, str]]
    live: NotRequired[bool]


class SnapshotResultSnapshot(TypedDict):
    id: str
    image: str
    provider: str
    sandboxId: str
    baseImage: str
    method: Literal["native", "archive"]
    live: bool
    createdAt: str
    expiresAt: str
    sizeBytes: int | None
    labels: dict[str, str]


class SnapshotResult(TypedDict):
    image: str
    snapshot: NotRequired[SnapshotResultSnapshot]


class SnapshotList(TypedDict):
    snapshots: list[SnapshotResultSnapshot]


class ForkRequest(TypedDict):
    count: int
    labels: NotRequired[dict[str, str]]
    env: NotRequired[dict[str, str]]
    ttlSeconds: NotRequired[int]
    snapshotTtlSeconds: NotRequired[int]
    live: NotRequired[bool]


class ForkResult(TypedDict):
    snapshot: SnapshotResultSnapshot
    sandboxes: list[Sandbox]


class HealthProvidersValue(TypedDict):
    ok: bool
    message: str


class Health(TypedDict):
    ok: bool
    version: NotRequired[str]
    daemonId: NotRequired[str]
    providers: NotRequired[dict[str, HealthProvidersValue]]


class AccessGrantRequest(TypedDict):
    sandboxIds: list[str]
    rights: list[Literal["exec", "files", "pty", "endpoints"]]
    ttlSeconds: NotRequired[int]


class AccessGrant(TypedDict):
    id: str
    sandboxIds: list[str]
    rights: list[Literal["exec", "files", "pty", "endpoints"]]
    createdAt: str
    expiresAt: str


class AccessGrantList(TypedDict):
    grants: list[AccessGrant]


class AccessGrantCreated(TypedDict):
    id: str
    sandboxIds: list[str]
    rights: list[Literal["exec", "files", "pty", "endpoints"]]
    createdAt: str
    expiresAt: str
    token: str


class PtyCreateRequest(TypedDict):
    command: NotRequired[str]
    cwd: NotRequired[str]
    env: NotRequired[dict[str, str]]
    rows: NotRequired[int]
    cols: NotRequired[int]
    user: NotRequired[str]
    tty: NotRequired[bool]


class PtyInfoOutput(TypedDict):
    start: int
    end: int


class PtyInfo(TypedDict):
    id: str
    sandboxId: str
    command: str | None
    tty: bool
    rows: int
    cols: int
    state: Literal["running", "exited", "lost"]
    exitCode: int | None
    reason: NotRequired[str]
    output: PtyInfoOutput
    held: bool
    createdAt: str


class PtyAttachment(TypedDict):
    pty: PtyInfo
    attachment: str


class PtyOutput(TypedDict):
    data: str
    offset: int
    next: int
    dropped: int
    eof: bool
    state: Literal["running", "exited", "lost"]
    exitCode: int | None


ExecStreamEvent = ExecStreamEventStdout | ExecStreamEventStderr | ExecStreamEventResult | ExecStreamEventError
SnapshotInfo = SnapshotResultSnapshot
