"""Every API call, described once (method, path, body) for the sync and the async client."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ._wire import DEFAULT_TIMEOUT_S, EXEC_TIMEOUT_MARGIN_S, Call, Upload, idempotency_key, require, segment, upload_body
from .schema import ExecRequest, OpenRolloutRequest, PoolAcquireRequest, PoolDefinition, SandboxSpec

# The daemon's default exec timeout (core/schemas/exec.ts), for the client's own wait.
DEFAULT_EXEC_TIMEOUT_MS = 60_000


def _sandbox(sandbox_id: str, rest: str = "") -> str:
    return f"/v1/sandboxes/{segment(sandbox_id)}{rest}"


def health() -> Call:
    return Call("GET", "/healthz")


def openapi() -> Call:
    return Call("GET", "/openapi.json")


def metrics() -> Call:
    return Call("GET", "/metrics")


def create_sandbox(spec: SandboxSpec | PoolAcquireRequest, key: str | None = None) -> Call:
    # A create answers once its readiness probe passed: wait at least that long, and a minute more.
    readiness = spec.get("readiness") or {}
    probe_s = readiness.get("timeoutMs", 0) / 1000  # type: ignore[union-attr]
    return Call(
        "POST",
        "/v1/sandboxes",
        json_body=dict(spec),
        has_json=True,
        timeout_s=max(DEFAULT_TIMEOUT_S, probe_s + 60),
        idempotency_key=idempotency_key(key),
    )


def acquire(
    pool: str, env: Mapping[str, str] | None, labels: Mapping[str, str] | None, ttl_seconds: int | None, key: str | None = None
) -> Call:
    request: dict[str, Any] = {"pool": pool}
    if env is not None:
        request["env"] = dict(env)
    if labels is not None:
        request["labels"] = dict(labels)
    if ttl_seconds is not None:
        request["ttlSeconds"] = ttl_seconds
    return Call("POST", "/v1/sandboxes", json_body=request, has_json=True, idempotency_key=idempotency_key(key))


def list_sandboxes(labels: Mapping[str, str] | None, provider: str | None) -> Call:
    query = [("label", f"{key}={value}") for key, value in (labels or {}).items()]
    if provider is not None:
        query.append(("provider", provider))
    return Call("GET", "/v1/sandboxes", query=query)


def get_sandbox(sandbox_id: str) -> Call:
    return Call("GET", _sandbox(sandbox_id))


def delete_sandbox(sandbox_id: str) -> Call:
    return Call("DELETE", _sandbox(sandbox_id))


def keepalive(sandbox_id: str, ttl_seconds: int | None) -> Call:
    return Call("POST", _sandbox(sandbox_id, "/keepalive"), json_body={} if ttl_seconds is None else {"ttlSeconds": ttl_seconds}, has_json=True)


def inspect_image(reference: str, provider: str | None) -> Call:
    query = [("reference", reference)] + ([("provider", provider)] if provider is not None else [])
    return Call("GET", "/v1/images/inspect", query=query)


def get_network(sandbox_id: str) -> Call:
    return Call("GET", _sandbox(sandbox_id, "/network"))


def set_network(sandbox_id: str, mode: str, allowed_hosts: Sequence[str]) -> Call:
    return Call("PUT", _sandbox(sandbox_id, "/network"), json_body={"mode": mode, "allowedHosts": list(allowed_hosts)}, has_json=True)


def exec_request(
    argv: Sequence[str] | None,
    command: str | None,
    *,
    session: str | None,
    cwd: str | None,
    env: Mapping[str, str] | None,
    stdin: str | bytes | None,
    timeout_ms: int | None,
    max_output_bytes: int | None,
    user: str | None,
) -> ExecRequest:
    """The exec body: exactly one of ``argv`` (no shell) or ``command`` (``sh -c``)."""
    require((argv is None) != (command is None), "an exec needs exactly one of argv or command")
    if isinstance(argv, str):
        raise TypeError("argv is a list of arguments; a shell command line goes in command=")
    request: ExecRequest = {}
    if argv is not None:
        request["argv"] = list(argv)
    if command is not None:
        request["command"] = command
    if session is not None:
        request["session"] = session
    if cwd is not None:
        request["cwd"] = cwd
    if env:
        request["env"] = dict(env)
    if stdin is not None:
        if isinstance(stdin, bytes):
            import base64

            request["stdin"] = base64.b64encode(stdin).decode("ascii")
            request["stdinEncoding"] = "base64"
        else:
            request["stdin"] = stdin
    if timeout_ms is not None:
        request["timeoutMs"] = timeout_ms
    if max_output_bytes is not None:
        request["maxOutputBytes"] = max_output_bytes
    if user is not None:
        request["user"] = user
    return request


def exec_call(sandbox_id: str, request: ExecRequest, *, stream: bool, key: str | None = None) -> Call:
    wait_s = request.get("timeoutMs", DEFAULT_EXEC_TIMEOUT_MS) / 1000 + EXEC_TIMEOUT_MARGIN_S
    return Call(
        "POST",
        _sandbox(sandbox_id, "/exec"),
        query=[("stream", "ndjson")] if stream else [],
        json_body=request,
        has_json=True,
        timeout_s=max(wait_s, DEFAULT_TIMEOUT_S) if stream else wait_s,
        idempotency_key=idempotency_key(key),
    )


def write_file(
    sandbox_id: str, path: str, source: Upload, mode: int | None, size_bytes: int | None, key: str | None = None
) -> Call:
    require(path.startswith("/"), f"paths inside a sandbox are absolute, not {path!r}")
    body = upload_body(source, size_bytes)
    require(
        body.data is not None or body.length is not None,
        "a file upload needs its size: give a path, bytes, a real file, or size_bytes=",
    )
    query = [("path", path)] + ([("mode", format(mode, "o"))] if mode is not None else [])
    return Call(
        "PUT",
        _sandbox(sandbox_id, "/files"),
        query=query,
        body=body,
        content_type="application/octet-stream",
        idempotency_key=idempotency_key(key),
    )


def read_file(sandbox_id: str, path: str) -> Call:
    require(path.startswith("/"), f"paths inside a sandbox are absolute, not {path!r}")
    return Call("GET", _sandbox(sandbox_id, "/files"), query=[("path", path)])


def write_archive(sandbox_id: str, directory: str, source: Upload, size_bytes: int | None, key: str | None = None) -> Call:
    require(directory.startswith("/"), f"paths inside a sandbox are absolute, not {directory!r}")
    return Call(
        "PUT",
        _sandbox(sandbox_id, "/archive"),
        query=[("path", directory)],
        body=upload_body(source, size_bytes),
        content_type="application/x-tar",
        idempotency_key=idempotency_key(key),
    )


def read_archive(sandbox_id: str, directory: str) -> Call:
    require(directory.startswith("/"), f"paths inside a sandbox are absolute, not {directory!r}")
    return Call("GET", _sandbox(sandbox_id, "/archive"), query=[("path", directory)])


def stop_processes(sandbox_id: str) -> Call:
    return Call("POST", _sandbox(sandbox_id, "/stop-processes"), json_body={}, has_json=True)


def snapshot(sandbox_id: str, image: str) -> Call:
    return Call("POST", _sandbox(sandbox_id, "/snapshot"), json_body={"image": image}, has_json=True)


def create_snapshot(
    sandbox_id: str, ttl_seconds: int | None, labels: Mapping[str, str] | None, live: bool = False
) -> Call:
    request: dict[str, Any] = {}
    if ttl_seconds is not None:
        request["ttlSeconds"] = ttl_seconds
    if labels is not None:
        request["labels"] = dict(labels)
    if live:
        request["live"] = True
    return Call("POST", _sandbox(sandbox_id, "/snapshot"), json_body=request, has_json=True)


def fork(
    sandbox_id: str,
    count: int,
    *,
    labels: Mapping[str, str] | None,
    env: Mapping[str, str] | None,
    ttl_seconds: int | None,
    snapshot_ttl_seconds: int | None,
    live: bool,
    key: str | None = None,
) -> Call:
    request: dict[str, Any] = {"count": count}
    if labels is not None:
        request["labels"] = dict(labels)
    if env is not None:
        request["env"] = dict(env)
    if ttl_seconds is not None:
        request["ttlSeconds"] = ttl_seconds
    if snapshot_ttl_seconds is not None:
        request["snapshotTtlSeconds"] = snapshot_ttl_seconds
    if live:
        request["live"] = True
    # A snapshot, then `count` creates (each may wait for admission): as long as creates may take.
    return Call(
        "POST",
        _sandbox(sandbox_id, "/fork"),
        json_body=request,
        has_json=True,
        timeout_s=DEFAULT_TIMEOUT_S + 60,
        idempotency_key=idempotency_key(key),
    )


def list_snapshots() -> Call:
    return Call("GET", "/v1/snapshots")


def get_snapshot(snapshot_id: str) -> Call:
    return Call("GET", f"/v1/snapshots/{segment(snapshot_id)}")


def delete_snapshot(snapshot_id: str) -> Call:
    return Call("DELETE", f"/v1/snapshots/{segment(snapshot_id)}")


def expose_gateway(sandbox_id: str) -> Call:
    return Call("POST", _sandbox(sandbox_id, "/gateway"), json_body={}, has_json=True)


def port_endpoint(sandbox_id: str, port: int) -> Call:
    return Call("GET", _sandbox(sandbox_id, f"/ports/{int(port)}"))


def service_output(sandbox_id: str) -> Call:
    return Call("GET", _sandbox(sandbox_id, "/service/output"))


def open_rollout(request: OpenRolloutRequest) -> Call:
    return Call("POST", "/v1/gateway/rollouts", json_body=dict(request), has_json=True)


def rollout_records(rollout_id: str) -> Call:
    return Call("GET", f"/v1/gateway/rollouts/{segment(rollout_id)}/records")


def close_rollout(rollout_id: str) -> Call:
    return Call("DELETE", f"/v1/gateway/rollouts/{segment(rollout_id)}")


def grant_access(sandbox_ids: Sequence[str], rights: Sequence[str], ttl_seconds: int | None) -> Call:
    request: dict[str, Any] = {"sandboxIds": list(sandbox_ids), "rights": list(rights)}
    if ttl_seconds is not None:
        request["ttlSeconds"] = ttl_seconds
    return Call("POST", "/v1/access", json_body=request, has_json=True)


def list_access() -> Call:
    return Call("GET", "/v1/access")


def revoke_access(grant_id: str) -> Call:
    return Call("DELETE", f"/v1/access/{segment(grant_id)}")


def define_pool(name: str, definition: PoolDefinition) -> Call:
    return Call("PUT", f"/v1/pools/{segment(name)}", json_body=dict(definition), has_json=True)


def get_pool(name: str) -> Call:
    return Call("GET", f"/v1/pools/{segment(name)}")


def list_pools() -> Call:
    return Call("GET", "/v1/pools")


def delete_pool(name: str) -> Call:
    return Call("DELETE", f"/v1/pools/{segment(name)}")
