"""The async client against a real daemon: the same calls, concurrently, on one kept-alive pool."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import pytest
from conftest import RUN_LABEL

from gym_sandboxd import AsyncGymClient, GymClient
from gym_sandboxd import errors as gym_errors


def test_async_sandbox_exec_stream_files_and_errors(client: GymClient, image: str, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with AsyncGymClient() as gym:
            created = await gym.create_sandbox({"image": image, "labels": dict(RUN_LABEL)})
            sandbox_id = created["id"]
            try:
                result = await gym.exec(sandbox_id, command="echo $A; exit 4", env={"A": "b"}, session="s")
                assert (result["status"], result["exitCode"], result["stdout"]) == ("ok", 4, "b\n")
                many = await asyncio.gather(*(gym.exec(sandbox_id, ["echo", str(index)]) for index in range(12)))
                assert [item["stdout"] for item in many] == [f"{index}\n" for index in range(12)]
                async with gym.exec_stream(sandbox_id, command="echo x; sleep 0.1; echo y") as events:
                    kinds = [event["type"] async for event in events]
                assert kinds == ["stdout", "stdout", "result"]
                timed_out = await gym.exec(sandbox_id, command="sleep 20", timeout_ms=300)
                assert timed_out["status"] == "timeout"
                source = tmp_path / "two.bin"
                source.write_bytes(os.urandom(2 * 1024 * 1024))
                await gym.write_file(sandbox_id, "/tmp/two.bin", source)
                target = tmp_path / "two-back.bin"
                assert await gym.download_file(sandbox_id, "/tmp/two.bin", target) == 2 * 1024 * 1024
                assert hashlib.sha256(target.read_bytes()).digest() == hashlib.sha256(source.read_bytes()).digest()

                async def chunks():
                    for index in range(3):
                        yield f"part {index}\n".encode()

                await gym.write_file(sandbox_id, "/tmp/parts.txt", chunks(), size_bytes=21)
                assert await gym.read_file_bytes(sandbox_id, "/tmp/parts.txt", max_bytes=100) == b"part 0\npart 1\npart 2\n"
                (tmp_path / "tree" / "a").mkdir(parents=True)
                (tmp_path / "tree" / "a" / "b.txt").write_text("b")
                await gym.upload_directory(sandbox_id, tmp_path / "tree", "/tmp/tree")
                await gym.download_directory(sandbox_id, "/tmp/tree", tmp_path / "tree-back")
                assert (tmp_path / "tree-back" / "a" / "b.txt").read_text() == "b"
                with pytest.raises(gym_errors.FileNotFoundInSandboxError):
                    await gym.read_file_bytes(sandbox_id, "/nowhere", max_bytes=10)
            finally:
                await gym.delete_sandbox(sandbox_id)
            with pytest.raises(gym_errors.SandboxNotFoundError):
                await gym.get_sandbox(sandbox_id)

    asyncio.run(scenario())


def test_async_keeps_one_connection_alive_per_loop(client: GymClient, sandbox_id: str) -> None:
    async def scenario() -> int:
        gym = AsyncGymClient(address=client.address)
        opened = 0
        original = gym._transport._connect

        async def counting():
            nonlocal opened
            opened += 1
            return await original()

        gym._transport._connect = counting  # type: ignore[method-assign]
        for _ in range(20):
            assert (await gym.exec(sandbox_id, ["true"], session="alive"))["status"] == "ok"
        await gym.aclose()
        return opened

    assert asyncio.run(scenario()) == 1


def test_async_over_a_unix_socket() -> None:
    async def scenario() -> None:
        async with AsyncGymClient(state_dir=os.environ["GYM_TEST_SOCKET_STATE_DIR"]) as gym:
            assert gym.address.socket is not None
            assert (await gym.health())["ok"] is True
            assert isinstance(await gym.list_sandboxes(), list)

    asyncio.run(scenario())


def test_async_pool_burst(client: GymClient, image: str, run_id: str) -> None:
    name = f"pyasync-{run_id}"

    async def scenario() -> None:
        async with AsyncGymClient() as gym:
            await gym.define_pool(name, {"spec": {"image": image, "labels": dict(RUN_LABEL)}, "minIdle": 3})
            try:
                for _ in range(300):
                    if (await gym.get_pool(name))["idle"] >= 3:
                        break
                    await asyncio.sleep(0.2)
                burst = await asyncio.gather(*(gym.acquire(name, labels=dict(RUN_LABEL)) for _ in range(3)))
                assert all(item["fromPool"] for item in burst)
                await asyncio.gather(*(gym.delete_sandbox(item["id"]) for item in burst))
            finally:
                await gym.delete_pool(name)

    asyncio.run(scenario())


def test_async_fork_and_snapshots(client: GymClient, sandbox_id: str) -> None:
    async def scenario() -> None:
        async with AsyncGymClient() as gym:
            made = await gym.create_snapshot(sandbox_id, ttl_seconds=120)
            try:
                assert (await gym.get_snapshot(made["id"]))["sandboxId"] == sandbox_id
                assert made["id"] in [item["id"] for item in await gym.list_snapshots()]
                child = await gym.create_sandbox({"image": made["image"], "labels": dict(RUN_LABEL)})
                await gym.delete_sandbox(child["id"])
            finally:
                await gym.delete_snapshot(made["id"])
            forked = await gym.fork(sandbox_id, 1, labels=dict(RUN_LABEL))
            try:
                assert forked["sandboxes"][0]["lineage"]["parent"] == sandbox_id
            finally:
                await gym.delete_sandbox(forked["sandboxes"][0]["id"])
                await gym.delete_snapshot(forked["snapshot"]["id"])
            with pytest.raises(gym_errors.SnapshotNotFoundError):
                await gym.get_snapshot(forked["snapshot"]["id"])

    asyncio.run(scenario())


def test_async_downloads_are_bounded_and_refuse_links_out(client: GymClient, sandbox_id: str, tmp_path: Path) -> None:
    made = client.exec(sandbox_id, command="mkdir -p /out && truncate -s 300M /out/report.json")
    assert made["exitCode"] == 0, made

    async def scenario() -> None:
        async with AsyncGymClient(address=client.address) as gym:
            with pytest.raises(gym_errors.FileTooLargeError):
                await gym.download_file(sandbox_id, "/out/report.json", tmp_path / "report.json", max_bytes=1024 * 1024)
            assert not (tmp_path / "report.json").exists()
            with pytest.raises(gym_errors.FileTooLargeError):
                await gym.download_directory(sandbox_id, "/out", tmp_path / "out", max_bytes=1024 * 1024)
            assert sum(path.stat().st_size for path in (tmp_path / "out").rglob("*") if path.is_file()) <= 1024 * 1024
            await gym.exec(sandbox_id, command="rm /out/report.json && ln -s /root /out/keys")
            with pytest.raises(gym_errors.ArchiveUnsafeError):
                await gym.download_directory(sandbox_id, "/out", tmp_path / "links")
            assert not (tmp_path / "links" / "keys").is_symlink()

    asyncio.run(scenario())
