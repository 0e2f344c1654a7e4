"""NeMo Gym's PTY sessions through its own facade (``sandbox.pty``) with our provider, on a real daemon.

The provider declares ``SupportsSandboxPty`` and ``SupportsSandboxPtyAttach``: a terminal echoes,
resizes (``stty size`` shows it), takes a signal, waits for its exit code, splits stderr in pipe
mode, and another process re-attaches and replays it from a byte offset, evicting this one.
"""

from __future__ import annotations

import asyncio
import json
import subprocess

import pytest
from conftest import RUN_LABEL, connected_script, python_command

from gym_sandboxd import GymClient
from gym_sandboxd.nemo_gym_provider import GymSandboxdProvider
from nemo_gym.sandbox import AsyncSandbox, SandboxPtyError, SandboxSpec, SupportsSandboxPty, SupportsSandboxPtyAttach

CONFIG = {"gym_sandboxd": {}}


def _spec(image: str, case: str) -> SandboxSpec:
    return SandboxSpec(image=image, metadata={**RUN_LABEL, "case": case})


async def _read_until(session, needle: bytes, *, reads: int = 40) -> bytes:
    seen = bytearray()
    for _ in range(reads):
        chunk = await session.read(timeout_s=10)
        if not chunk:
            break
        seen.extend(chunk)
        if needle in seen:
            return bytes(seen)
    raise AssertionError(f"{needle!r} never came: {bytes(seen)[-500:]!r}")


def test_the_provider_declares_terminals_and_their_reattach() -> None:
    provider = GymSandboxdProvider()
    assert isinstance(provider, SupportsSandboxPty) and isinstance(provider, SupportsSandboxPtyAttach)


def test_a_terminal_echoes_resizes_takes_a_signal_and_exits(client: GymClient, image: str) -> None:
    async def scenario() -> None:
        async with AsyncSandbox(CONFIG, _spec(image, "pty")) as sandbox:
            await sandbox.start()
            async with await sandbox.pty.create(rows=30, cols=100) as shell:
                assert shell.mode == "pty" and shell.session_id.startswith("pty-")
                await shell.write(b"echo nemo-$((6 * 7)); stty size\n")
                seen = await _read_until(shell, b"30 100")
                assert b"nemo-42" in seen
                await shell.resize(40, 120)
                await shell.write(b"stty size\n")
                await _read_until(shell, b"40 120")
            # A command session: a signal ends it, its exit says so.
            sleeper = await sandbox.pty.create("sleep 300")
            await sleeper.send_signal("SIGINT")
            assert await sleeper.wait_exit(timeout_s=30) == 130
            await sleeper.close()
            # Its own exit code; the output drains to b"".
            quitter = await sandbox.pty.create("echo bye-$((3 * 3)); exit 7")
            assert await quitter.wait_exit(timeout_s=30) == 7
            output = bytearray()
            while chunk := await quitter.read(timeout_s=10):
                output.extend(chunk)
            assert b"bye-9" in output
            await quitter.close()
            # Pipe mode: stdout and stderr apart.
            ran = await sandbox.pty.exec("echo out-1; echo err-2 >&2; exit 3", pty=False, timeout_s=30)
            assert (ran.stdout, ran.stderr, ran.return_code) == ("out-1\n", "err-2\n", 3)
            # The facade's run-and-collect in a terminal.
            ran = await sandbox.pty.exec("echo in-a-pty", timeout_s=30)
            assert ran.return_code == 0 and "in-a-pty" in ran.stdout
            # Every session here was closed: gone from the daemon (their processes killed).
            assert client.list_ptys(sandbox._handle.sandbox_id) == []

    asyncio.run(scenario())


def test_another_process_reattaches_and_replays_from_an_offset(client: GymClient, image: str) -> None:
    async def first() -> tuple[dict, str, object, AsyncSandbox]:
        sandbox = await AsyncSandbox(CONFIG, _spec(image, "pty-attach")).start()
        shell = await sandbox.pty.create()
        await shell.write(b"echo first-$((10 + 1))\n")
        await _read_until(shell, b"first-11")
        return await sandbox.serialize(), shell.session_id, shell, sandbox

    async def scenario() -> None:
        descriptor, session_id, shell, sandbox = await first()
        other = connected_script(
            "    session = await sandbox.pty.attach(sys.argv[2], since=0)\n"
            "    seen = bytearray()\n"
            "    while b'first-11' not in seen:\n"
            "        seen.extend(await session.read(timeout_s=10))\n"
            "    await session.write(b'echo second-$((20 + 2))\\n')\n"
            "    while b'second-22' not in seen:\n"
            "        seen.extend(await session.read(timeout_s=10))\n"
            "    print(json.dumps({'replayed': seen.decode(errors='replace')}))\n"
            "    await session.close()\n"
        )
        moved = await asyncio.to_thread(
            subprocess.run, [*python_command(other), json.dumps(descriptor), session_id], capture_output=True, text=True, timeout=120
        )
        assert moved.returncode == 0, moved.stderr
        replayed = json.loads(moved.stdout)["replayed"]
        # From offset 0: what this process saw before the other attached, then its own command.
        assert "echo first-$((10 + 1))" in replayed and "second-22" in replayed
        # Taken over: this process's hold is gone.
        with pytest.raises(SandboxPtyError, match="taken over"):
            await shell.write(b"echo never\n")
        # Let go by the other (detached, not ended): it attaches again without a takeover.
        again = await sandbox.pty.attach(session_id, takeover=False, since=None)
        await again.write(b"echo third-$((30 + 3))\n")
        await _read_until(again, b"third-33")
        await again.close()
        await sandbox.stop()
        assert client.list_sandboxes(labels={**RUN_LABEL, "case": "pty-attach"}) == []

    asyncio.run(scenario())
