"""The sync client against a real daemon: sandboxes, exec, files, archives, pools, the gateway, snapshots, fork."""

from __future__ import annotations

import hashlib
import inspect
import io
import os
import subprocess
import tarfile
import time
import tracemalloc
from pathlib import Path

import pytest
from conftest import RUN_LABEL

from gym_sandboxd import DEFAULT_MAX_DOWNLOAD_BYTES, GymClient, find_daemon
from gym_sandboxd import errors as gym_errors
from gym_sandboxd._sync_transport import SyncTransport


def test_finds_the_daemon_from_the_state_directory(client: GymClient) -> None:
    health = client.health()
    assert health["ok"] is True
    assert health["daemonId"].startswith("daemon-")
    assert client.address.url is not None and client.address.url.startswith("http://127.0.0.1:")


def test_explicit_url_and_token_and_a_wrong_token(client: GymClient) -> None:
    with GymClient(url=client.address.url, token=client.address.token) as explicit:
        assert explicit.health()["daemonId"] == client.health()["daemonId"]
    with GymClient(url=client.address.url, token="not-the-token") as wrong:
        with pytest.raises(gym_errors.UnauthorizedError) as caught:
            wrong.list_sandboxes()
    assert caught.value.code == "UNAUTHORIZED" and caught.value.status == 401


def test_unix_socket_daemon_found_and_named_explicitly() -> None:
    state_dir = os.environ["GYM_TEST_SOCKET_STATE_DIR"]
    with GymClient(state_dir=state_dir) as found:
        assert found.address.socket is not None and found.address.url is None
        assert found.health()["ok"] is True
        with GymClient(socket=found.address.socket, token=found.address.token) as named:
            assert named.health()["daemonId"] == found.health()["daemonId"]


def test_no_daemon_is_daemon_unavailable(tmp_path: Path) -> None:
    with pytest.raises(gym_errors.DaemonUnavailableError):
        GymClient(state_dir=tmp_path)
    (tmp_path / "token").write_text("x")
    with GymClient(url="http://127.0.0.1:9", state_dir=tmp_path) as nowhere:
        with pytest.raises(gym_errors.DaemonUnavailableError) as caught:
            nowhere.health()
    assert caught.value.status == 503


def test_state_dir_from_a_config_file(tmp_path: Path, client: GymClient) -> None:
    config = tmp_path / "gym.yaml"
    config.write_text(f"# a config\nstateDir: '{os.environ['GYM_STATE_DIR']}'\n")
    address = find_daemon(env={"GYM_CONFIG": str(config), "HOME": str(tmp_path)})
    assert address.url == client.address.url


def test_sandbox_lifecycle_and_typed_errors(client: GymClient, image: str) -> None:
    created = client.create_sandbox({"image": image, "labels": {**RUN_LABEL, "case": "lifecycle"}, "ttlSeconds": 600})
    sandbox_id = created["id"]
    assert created["state"] == "ready" and created["fromPool"] is False
    assert client.get_sandbox(sandbox_id)["labels"]["case"] == "lifecycle"
    assert [item["id"] for item in client.list_sandboxes(labels={"case": "lifecycle", **RUN_LABEL})] == [sandbox_id]
    renewed = client.keepalive(sandbox_id, ttl_seconds=900)  # 900 s from now is past 600 s from the create
    assert renewed["leaseExpiresAt"] > created["leaseExpiresAt"]
    client.delete_sandbox(sandbox_id)
    client.delete_sandbox(sandbox_id)  # deleting twice is not an error
    with pytest.raises(gym_errors.SandboxNotFoundError) as caught:
        client.get_sandbox(sandbox_id)
    assert (caught.value.code, caught.value.status, caught.value.details["sandboxId"]) == ("SANDBOX_NOT_FOUND", 404, sandbox_id)
    with pytest.raises(gym_errors.ValidationFailedError) as invalid:
        client.create_sandbox({"image": image, "resources": {"cpus": 0}})  # type: ignore[typeddict-item]
    assert invalid.value.status == 400 and invalid.value.details["issues"]


def test_exec_one_shot_and_in_a_session(client: GymClient, sandbox_id: str) -> None:
    result = client.exec(sandbox_id, ["sh", "-c", 'echo "$GREETING"; echo err >&2; exit 3'], env={"GREETING": "hi"})
    assert (result["status"], result["exitCode"], result["stdout"], result["stderr"]) == ("ok", 3, "hi\n", "err\n")
    assert client.exec(sandbox_id, command="pwd", cwd="/tmp")["stdout"] == "/tmp\n"
    assert client.exec(sandbox_id, ["cat"], stdin=b"\x00\x01bytes")["stdout"] == "\x00\x01bytes"
    for _ in range(3):
        in_session = client.exec(sandbox_id, command="echo $((6 * 7))", session="main")
        assert (in_session["status"], in_session["stdout"]) == ("ok", "42\n")
        assert "session" not in in_session  # it ran in the session, not one-shot
    timed_out = client.exec(sandbox_id, command="sleep 30", session="main", timeout_ms=300)
    assert timed_out["status"] == "timeout" and timed_out["exitCode"] is None
    assert client.exec(sandbox_id, ["true"], session="main")["status"] == "ok"  # still usable


def test_exec_stream_events_and_leaving_early_cancels(client: GymClient, sandbox_id: str) -> None:
    with client.exec_stream(sandbox_id, command="echo one; sleep 0.2; echo two >&2") as events:
        seen = list(events)
    assert [event["type"] for event in seen] == ["stdout", "stderr", "result"]
    assert seen[-1]["result"]["stdout"] == "one\n"  # type: ignore[typeddict-item]
    with client.exec_stream(sandbox_id, command="echo started; sleep 1; touch /tmp/late") as events:
        assert next(events)["type"] == "stdout"
    time.sleep(1.8)
    assert client.exec(sandbox_id, ["test", "-e", "/tmp/late"])["exitCode"] == 1


def test_a_50_mib_file_up_and_down_streamed(client: GymClient, sandbox_id: str, tmp_path: Path) -> None:
    source = tmp_path / "big.bin"
    with open(source, "wb") as output:
        for index in range(50):  # every MiB differs, so a lost, repeated or reordered piece shows
            output.write(index.to_bytes(4, "big") + os.urandom(1024 * 1024 - 4))
    target = tmp_path / "back" / "big.bin"
    tracemalloc.start()
    try:
        client.write_file(sandbox_id, "/data/big.bin", source, mode=0o600)
        written = client.download_file(sandbox_id, "/data/big.bin", target)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert written == 50 * 1024 * 1024
    assert hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(source.read_bytes()).digest()
    assert peak < 8 * 1024 * 1024, f"the transfer held {peak} bytes at once: it is not streamed"
    assert client.exec(sandbox_id, ["stat", "-c", "%a %s", "/data/big.bin"])["stdout"] == f"600 {50 * 1024 * 1024}\n"
    with pytest.raises(gym_errors.FileTooLargeError):
        client.read_file_bytes(sandbox_id, "/data/big.bin", max_bytes=1024)
    with pytest.raises(gym_errors.FileNotFoundInSandboxError):
        client.read_file_bytes(sandbox_id, "/data/missing", max_bytes=1024)


def test_directories_as_tar_streams_and_an_unsafe_archive(client: GymClient, sandbox_id: str, tmp_path: Path) -> None:
    local = tmp_path / "repo"
    (local / "src").mkdir(parents=True)
    (local / "src" / "main.py").write_text("print('hi')\n")
    (local / "README").write_text("readme\n")
    client.upload_directory(sandbox_id, local, "/work/repo")
    assert client.exec(sandbox_id, ["cat", "/work/repo/src/main.py"])["stdout"] == "print('hi')\n"
    back = tmp_path / "back"
    client.download_directory(sandbox_id, "/work/repo", back)
    assert (back / "src" / "main.py").read_text() == "print('hi')\n" and (back / "README").read_text() == "readme\n"
    unsafe = io.BytesIO()
    with tarfile.open(fileobj=unsafe, mode="w") as archive:
        entry = tarfile.TarInfo("../escaped")
        entry.size = 1
        archive.addfile(entry, io.BytesIO(b"x"))
    with pytest.raises(gym_errors.ArchiveUnsafeError):
        client.write_archive(sandbox_id, "/work/repo", unsafe.getvalue())
    assert client.exec(sandbox_id, ["test", "-e", "/work/escaped"])["exitCode"] == 1


def test_pool_acquire_is_warm(client: GymClient, image: str, run_id: str) -> None:
    name = f"py-{run_id}"
    client.define_pool(name, {"spec": {"image": image, "labels": dict(RUN_LABEL)}, "minIdle": 1})
    try:
        deadline = time.monotonic() + 60
        while client.get_pool(name)["idle"] < 1:
            assert time.monotonic() < deadline, client.get_pool(name)["lastError"]
            time.sleep(0.2)
        acquired = client.acquire(name, env={"TASK": "t1"}, labels={**RUN_LABEL, "task": "t1"}, ttl_seconds=300)
        assert acquired["fromPool"] is True and acquired["pool"] == name and acquired["labels"]["task"] == "t1"
        assert client.exec(acquired["id"], command="echo $TASK")["stdout"] == "t1\n"
        assert name in [pool["name"] for pool in client.list_pools()]
        client.delete_sandbox(acquired["id"])
    finally:
        client.delete_pool(name)
    with pytest.raises(gym_errors.PoolNotFoundError):
        client.get_pool(name)


def test_gateway_rollout_url_and_key(client: GymClient, sandbox_id: str, run_id: str) -> None:
    # An upstream on loopback that nothing here calls: opening a rollout needs one named.
    upstream = {"baseUrl": "http://127.0.0.1:9/v1", "model": "none"}
    rollout = client.open_rollout(f"py-{run_id}", upstream=upstream)  # type: ignore[arg-type]
    try:
        assert rollout["rolloutId"] == f"py-{run_id}" and len(rollout["key"]) >= 32
        assert client.rollout_url(rollout) == f"{client.address.url}{rollout['basePath']}"
        with pytest.raises(gym_errors.RolloutConflictError):
            client.open_rollout(f"py-{run_id}", upstream=upstream)  # type: ignore[arg-type]
        reach = client.expose_gateway(sandbox_id)
        assert reach["url"].startswith("http://127.0.0.1:")
        assert client.expose_gateway(sandbox_id) == reach  # the same for the sandbox's life
        assert client.rollout_records(rollout["rolloutId"]) == []
    finally:
        client.close_rollout(rollout["rolloutId"])


def test_snapshot_names_an_image_later_specs_create_from(client: GymClient, sandbox_id: str, run_id: str) -> None:
    client.exec(sandbox_id, command="echo kept > /snapshot-marker")
    image = client.snapshot(sandbox_id, f"gym-snapshot/python-test-{run_id}:v1")
    child = client.create_sandbox({"image": image, "labels": dict(RUN_LABEL)})
    try:
        assert client.exec(child["id"], ["cat", "/snapshot-marker"])["stdout"] == "kept\n"
    finally:
        client.delete_sandbox(child["id"])
        # The daemon has no route to remove an image; on Docker (these tests') the engine does.
        subprocess.run(["docker", "rmi", "-f", image], capture_output=True, check=False)


def test_fork_gives_children_of_the_parent_files_with_lineage(client: GymClient, sandbox_id: str) -> None:
    client.exec(sandbox_id, command="echo prepared > /fork-marker")
    forked = client.fork(sandbox_id, 2, labels=dict(RUN_LABEL), snapshot_ttl_seconds=600)
    snapshot = forked["snapshot"]
    children = forked["sandboxes"]
    try:
        assert snapshot["image"] == f"snapshot:{snapshot['id']}" and snapshot["sandboxId"] == sandbox_id
        assert [child["lineage"] for child in children] == [
            {"parent": sandbox_id, "snapshot": snapshot["id"], "forkIndex": index} for index in range(2)
        ]
        assert all(child["labels"]["gym.fork.parent"] == sandbox_id for child in children)
        for child in children:
            assert client.exec(child["id"], ["cat", "/fork-marker"])["stdout"] == "prepared\n"
        assert snapshot["id"] in [item["id"] for item in client.list_snapshots()]
        assert client.get_snapshot(snapshot["id"])["method"] in ("native", "archive")
        # A later sandbox starts from the same snapshot by naming it.
        later = client.create_sandbox({"image": snapshot["image"], "labels": dict(RUN_LABEL)})
        try:
            assert client.exec(later["id"], ["cat", "/fork-marker"])["stdout"] == "prepared\n"
        finally:
            client.delete_sandbox(later["id"])
    finally:
        for child in children:
            client.delete_sandbox(child["id"])
        client.delete_snapshot(snapshot["id"])
    with pytest.raises(gym_errors.SnapshotNotFoundError):
        client.get_snapshot(snapshot["id"])
    client.delete_snapshot(snapshot["id"])  # idempotent


def test_fork_refusals(client: GymClient, sandbox_id: str) -> None:
    with pytest.raises(gym_errors.CapabilityUnsupportedError) as caught:
        client.fork(sandbox_id, 1, live=True)
    assert caught.value.details["capability"] == "liveFork"
    with pytest.raises(gym_errors.ValidationFailedError):
        client.fork(sandbox_id, 1, labels={"gym.fork.parent": "sbx-forged"})
    made = client.create_snapshot(sandbox_id, ttl_seconds=60, labels={"kind": "managed"})
    try:
        assert made["labels"] == {"kind": "managed"}
    finally:
        client.delete_snapshot(made["id"])


def test_connections_are_kept_alive(client: GymClient, sandbox_id: str) -> None:
    opened: list[int] = []
    transport = SyncTransport(client.address)
    original = transport._new_connection
    transport._new_connection = lambda timeout_s: opened.append(1) or original(timeout_s)  # type: ignore[method-assign]
    with GymClient(address=client.address) as fresh:
        fresh._transport = transport
        for _ in range(20):
            assert fresh.exec(sandbox_id, ["true"], session="keepalive")["status"] == "ok"
    assert len(opened) == 1


def test_scoped_access_lends_one_sandbox_and_is_revoked(client: GymClient, sandbox_id: str) -> None:
    """A credential the token holder mints: its rights on its sandbox, nothing else, until revoked."""
    other = client.create_sandbox({"image": os.environ.get("GYM_TEST_IMAGE", "gym/busybox:latest"), "labels": dict(RUN_LABEL)})["id"]
    granted = client.grant_access([sandbox_id], ["files"], ttl_seconds=600)
    assert granted["sandboxIds"] == [sandbox_id] and granted["rights"] == ["files"]
    assert granted["id"] in [grant["id"] for grant in client.list_access()]
    assert granted["token"] not in repr(client.list_access())
    # GYM_TOKEN is read as the CLI reads it; the daemon is still found through the state directory.
    with GymClient(env={**os.environ, "GYM_TOKEN": granted["token"]}) as lent:
        lent.write_file(sandbox_id, "/tmp/lent.txt", b"lent")
        assert lent.read_file_bytes(sandbox_id, "/tmp/lent.txt", max_bytes=100) == b"lent"
        for refused in (
            lambda: lent.exec(sandbox_id, ["true"]),
            lambda: lent.read_file_bytes(other, "/etc/hostname", max_bytes=100),
            lambda: lent.delete_sandbox(sandbox_id),
            lambda: lent.list_sandboxes(),
            lambda: lent.list_access(),
        ):
            with pytest.raises(gym_errors.AccessDeniedError):
                refused()
        client.revoke_access(granted["id"])
        with pytest.raises(gym_errors.UnauthorizedError):
            lent.get_sandbox(sandbox_id)
    client.delete_sandbox(other)


def test_a_sparse_file_comes_down_only_up_to_the_bound(client: GymClient, sandbox_id: str, tmp_path: Path) -> None:
    # 300 MiB to the sandbox's `ls`, no block of its disk; the host would write every byte.
    made = client.exec(sandbox_id, command="mkdir -p /out && truncate -s 300M /out/report.json && echo ok > /out/small")
    assert made["exitCode"] == 0, made
    bound = 4 * 1024 * 1024
    target = tmp_path / "report.json"
    with pytest.raises(gym_errors.FileTooLargeError) as refused:
        client.download_file(sandbox_id, "/out/report.json", target, max_bytes=bound)
    assert refused.value.details["maxBytes"] == bound and not target.exists()
    with pytest.raises(gym_errors.FileTooLargeError):
        client.download_directory(sandbox_id, "/out", tmp_path / "out", max_bytes=bound)
    on_disk = sum(path.stat().st_size for path in (tmp_path / "out").rglob("*") if path.is_file())
    assert on_disk <= bound
    # The caller raises the bound for what it expects to be large.
    client.exec(sandbox_id, command="truncate -s 6M /out/report.json")
    assert client.download_file(sandbox_id, "/out/report.json", target, max_bytes=8 * 1024 * 1024) == 6 * 1024 * 1024
    client.download_directory(sandbox_id, "/out", tmp_path / "raised", max_bytes=8 * 1024 * 1024)
    assert (tmp_path / "raised" / "report.json").stat().st_size == 6 * 1024 * 1024
    for call in (GymClient.download_file, GymClient.download_directory):
        assert inspect.signature(call).parameters["max_bytes"].default == DEFAULT_MAX_DOWNLOAD_BYTES == 1024**3


def test_an_agent_made_link_never_leads_out_of_the_downloaded_folder(client: GymClient, sandbox_id: str, tmp_path: Path) -> None:
    # The engine's archive carries the agent's links as they are; each of these leads out of the
    # folder on this host (the PATH_MAX technique needs a hand-made tar: tests/test_tar.py).
    outside = tmp_path / "outside"
    outside.mkdir()
    attacks = {
        "absolute": f"ln -s {outside} keys",
        "climbing": "ln -s ../outside up",
        "through-links": "mkdir -p p/q && ln -s ../.. p/q/top && ln -s p/q/top/../outside out",
    }
    for name, links in attacks.items():
        made = client.exec(sandbox_id, command=f"mkdir -p /out/{name} && cd /out/{name} && echo x > file && {links}")
        assert made["exitCode"] == 0, made
        with pytest.raises(gym_errors.ArchiveUnsafeError):
            client.download_directory(sandbox_id, f"/out/{name}", tmp_path / name)
        assert [path for path in (tmp_path / name).rglob("*") if path.is_symlink()] == [], name
    assert list(outside.iterdir()) == []


def test_a_call_repeated_with_one_idempotency_key_runs_once(client: GymClient, sandbox_id: str, image: str) -> None:
    key = f"py-exec-{os.urandom(8).hex()}"
    appends = {"command": "echo run >> /tmp/idempotent-count; wc -l < /tmp/idempotent-count"}
    first = client.exec(sandbox_id, **appends, idempotency_key=key)
    again = client.exec(sandbox_id, **appends, idempotency_key=key)
    assert first == again and first["stdout"].strip() == "1"
    # The file holds one line: the repeat did not run.
    assert client.exec(sandbox_id, ["cat", "/tmp/idempotent-count"])["stdout"] == "run\n"
    # Another request under the key is refused, and runs nothing.
    with pytest.raises(gym_errors.IdempotencyKeyMismatchError):
        client.exec(sandbox_id, command="echo other >> /tmp/idempotent-count", idempotency_key=key)
    assert client.exec(sandbox_id, ["cat", "/tmp/idempotent-count"])["stdout"] == "run\n"
    # A create too: one sandbox for one key.
    create_key = f"py-create-{os.urandom(8).hex()}"
    spec = {"image": image, "labels": dict(RUN_LABEL)}
    created = client.create_sandbox(spec, idempotency_key=create_key)  # type: ignore[arg-type]
    try:
        assert client.create_sandbox(spec, idempotency_key=create_key)["id"] == created["id"]  # type: ignore[arg-type]
        same_run = [sandbox for sandbox in client.list_sandboxes(labels=RUN_LABEL) if sandbox["id"] == created["id"]]
        assert len(same_run) == 1
    finally:
        client.delete_sandbox(created["id"])


def test_egress_policy_set_and_read_within_the_operators_cap(client: GymClient, sandbox_id: str) -> None:
    assert client.get_network(sandbox_id)["policy"] == {"mode": "none", "allowedHosts": []}
    view = client.set_network(sandbox_id, "allowlist", [])
    assert view["policy"] == {"mode": "allowlist", "allowedHosts": []}
    assert client.get_network(sandbox_id)["policy"] == view["policy"]
    # The test daemons' cap allows no public egress: refused, and the policy stays as it was.
    with pytest.raises(gym_errors.ForbiddenByConfigError, match="egress.allowPublic"):
        client.set_network(sandbox_id, "public")
    assert client.get_network(sandbox_id)["policy"]["mode"] == "allowlist"


def test_inspect_image_says_what_a_sandbox_of_it_starts_with(client: GymClient, image: str) -> None:
    info = client.inspect_image(image)
    assert info["reference"] == image
    assert isinstance(info["labels"], dict)
    with pytest.raises(gym_errors.ImageNotFoundError):
        client.inspect_image("gym/no-such-image:none")
