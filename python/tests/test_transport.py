"""The HTTP/1.1 transports against a loopback server that misbehaves the way real ones do.

A daemon closes a kept-alive connection once it has been idle a while; the next request on it
fails before anything was processed, and must go again on a new connection. The server here
answers each connection's first request (chunked or with a length) and then closes it without
saying so, so every reuse meets a connection closed under it.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator

import pytest

from gym_sandboxd import AsyncGymClient, GymClient
from gym_sandboxd.discovery import DaemonAddress
from gym_sandboxd.errors import DaemonUnavailableError
from gym_sandboxd.nemo_gym_provider import _exec_result


@pytest.fixture
def one_request_server() -> Iterator[tuple[int, list[bytes]]]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.1)  # so the loop sees the stop at the end of the test
    requests: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        count = 0
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection.settimeout(5)
            with connection:
                data = b""
                while b"\r\n\r\n" not in data:
                    piece = connection.recv(65536)
                    if not piece:
                        break
                    data += piece
                if not data:
                    continue
                requests.append(data.split(b"\r\n", 1)[0])
                count += 1
                body = b'{"ok": true, "daemonId": "daemon-fake", "count": %d}' % count
                if count % 2:
                    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
                    connection.sendall(head + b"%x\r\n%s\r\n0\r\n\r\n" % (len(body), body))
                else:
                    head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                    connection.sendall(head + body)
                # Closed without "Connection: close": the client finds out on its next request.

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], requests
    stop.set()
    listener.close()
    thread.join(timeout=5)


def test_sync_client_sends_again_on_a_connection_closed_while_idle(one_request_server) -> None:
    port, requests = one_request_server
    with GymClient(address=DaemonAddress(token="t", host="127.0.0.1", port=port)) as client:
        answers = [client.health()["count"] for _ in range(4)]  # type: ignore[typeddict-item]
    assert answers == [1, 2, 3, 4] and len(requests) == 4


def test_async_client_sends_again_on_a_connection_closed_while_idle(one_request_server) -> None:
    port, requests = one_request_server

    async def scenario() -> list[int]:
        async with AsyncGymClient(address=DaemonAddress(token="t", host="127.0.0.1", port=port)) as client:
            answers = []
            for _ in range(4):
                answers.append((await client.health())["count"])  # type: ignore[typeddict-item]
                await asyncio.sleep(0.05)  # let the close arrive, as it would after an idle while
            return answers

    assert asyncio.run(scenario()) == [1, 2, 3, 4] and len(requests) == 4


@pytest.fixture
def drop_first_server() -> Iterator[tuple[int, list[bytes]]]:
    """Reads the first request and closes the connection without an answer (a daemon killed
    mid-request); answers every later one. Yields the port and each request's head."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    listener.settimeout(0.1)
    heads: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            connection.settimeout(5)
            with connection:
                data = b""
                while b"\r\n\r\n" not in data:
                    piece = connection.recv(65536)
                    if not piece:
                        break
                    data += piece
                if not data:
                    continue
                heads.append(data.split(b"\r\n\r\n", 1)[0])
                if len(heads) == 1:
                    continue
                body = b'{"status": "ok", "exitCode": 0, "stdout": "", "stderr": ""}'
                head = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                connection.sendall(head + body)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], heads
    stop.set()
    listener.close()
    thread.join(timeout=5)


def _keys(heads: list[bytes]) -> list[str]:
    keys = []
    for head in heads:
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"idempotency-key":
                keys.append(value.strip().decode())
    return keys


def test_sync_client_sends_a_call_cut_off_mid_request_again_with_its_idempotency_key(drop_first_server) -> None:
    port, heads = drop_first_server
    with GymClient(address=DaemonAddress(token="t", host="127.0.0.1", port=port)) as client:
        assert client.exec("sbx-abcdefgh", ["true"])["status"] == "ok"
    keys = _keys(heads)
    assert len(heads) == 2 and len(keys) == 2 and keys[0] == keys[1]
    # A call without a key (it may not be safe twice) is not sent again on a fresh connection.
    heads.clear()
    with GymClient(address=DaemonAddress(token="t", host="127.0.0.1", port=port)) as client:
        with pytest.raises(DaemonUnavailableError):
            client.keepalive("sbx-abcdefgh")
    assert len(heads) == 1 and _keys(heads) == []


def test_async_client_sends_a_call_cut_off_mid_request_again_with_its_idempotency_key(drop_first_server) -> None:
    port, heads = drop_first_server

    async def scenario() -> str:
        async with AsyncGymClient(address=DaemonAddress(token="t", host="127.0.0.1", port=port)) as client:
            return (await client.exec("sbx-abcdefgh", ["true"]))["status"]

    assert asyncio.run(scenario()) == "ok"
    keys = _keys(heads)
    assert len(heads) == 2 and len(keys) == 2 and keys[0] == keys[1]


@pytest.mark.parametrize(
    ("status", "exit_code", "expected"),
    [
        ("ok", 3, (3, None)),
        ("timeout", None, (125, "timeout")),
        ("sandbox_gone", None, (125, "sandbox")),
        ("oom", None, (137, None)),
        ("killed", 143, (143, None)),
        ("killed", None, (137, None)),
    ],
)
def test_exec_statuses_map_as_nemo_gym_providers_report_them(status: str, exit_code: int | None, expected: tuple) -> None:
    result = _exec_result(
        {"status": status, "exitCode": exit_code, "stdout": "out", "stderr": "",  # type: ignore[typeddict-item]
         "stdoutTruncated": False, "stderrTruncated": False, "stdoutBytes": 3, "stderrBytes": 0, "durationMs": 1.0},
        timeout_s=2,
    )  # fmt: skip
    assert (result.return_code, result.error_type) == expected
    assert result.stdout == "out"


def test_a_sandbox_the_command_took_down_says_why_and_stays_the_commands_own_failure() -> None:
    result = _exec_result(
        {"status": "oom", "exitCode": None, "stdout": "", "stderr": "", "sandboxLost": True,  # type: ignore[typeddict-item]
         "reason": "the sandbox ran out of memory", "stdoutTruncated": False, "stderrTruncated": False,
         "stdoutBytes": 0, "stderrBytes": 0, "durationMs": 1.0},
        timeout_s=2,
    )  # fmt: skip
    assert (result.return_code, result.error_type) == (137, None)
    assert result.stderr == "killed: out of memory; the sandbox did not survive it: the sandbox ran out of memory"
