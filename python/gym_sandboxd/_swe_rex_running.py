"""A SWE-ReX session command run as a streamed exec (``swe_rex``), for ``expect``.

SWE-ReX answers a command as soon as its output shows one of the ``expect`` strings, and the
command goes on running until it ends or is interrupted. Here such a command is a streamed exec
read by a thread of its own: the call that started it answers at the match, and the command lives
on in the sandbox, still under its timeout, until the next call of its session interrupts it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

from . import _swe_rex_shell as shell
from .client import GymClient
from .schema import ExecResult

# Unread output kept of a command nobody reads yet (its tail), when `max_output_bytes` is not set.
DEFAULT_MAX_HELD_OUTPUT = 1024 * 1024
TRUNCATED = "[... output truncated ...]\n"
# The script's stderr carries only its control lines (the command's stderr joins its stdout), and
# they come first: what a command writes there beyond them by other ways is not kept.
MAX_CONTROL_CHARS = 64 * 1024


class HeldCommand:
    """One session command as a streamed exec. Thread-safe."""

    def __init__(
        self,
        client: GymClient,
        sandbox_id: str,
        argv: list[str],
        run_id: str,
        timeout_ms: int,
        max_output_bytes: int | None,
    ) -> None:
        self._client = client
        self._sandbox_id = sandbox_id
        self._argv = argv
        self.run_id = run_id
        self._timeout_ms = timeout_ms
        self._max_output_bytes = max_output_bytes
        self._max_unread = max_output_bytes or DEFAULT_MAX_HELD_OUTPUT
        self._changed = threading.Condition()
        self._unread = ""
        self._stderr = ""
        self._finished = False
        self.result: ExecResult | None = None
        self.error: BaseException | None = None
        threading.Thread(target=self._read, name=f"gym-swe-rex-{run_id[:8]}", daemon=True).start()

    def _read(self) -> None:
        try:
            with self._client.exec_stream(
                self._sandbox_id, self._argv, timeout_ms=self._timeout_ms, max_output_bytes=self._max_output_bytes
            ) as events:
                for event in events:
                    with self._changed:
                        if event["type"] == "stdout":
                            self._append(event["data"])
                        elif event["type"] == "stderr" and len(self._stderr) < MAX_CONTROL_CHARS:
                            self._stderr += event["data"]
                        elif event["type"] == "result":
                            self.result = event["result"]  # type: ignore[assignment]
                        self._changed.notify_all()
        except BaseException as error:  # noqa: BLE001 - the daemon's error event too: the caller raises it
            self.error = error
        finally:
            with self._changed:
                self._finished = True
                self._changed.notify_all()

    def _append(self, data: str) -> None:
        self._unread += data
        if len(self._unread) > self._max_unread:
            self._unread = TRUNCATED + self._unread[-self._max_unread :]

    @property
    def finished(self) -> bool:
        with self._changed:
            return self._finished

    @property
    def stderr(self) -> str:
        with self._changed:
            return self._stderr

    @property
    def pid(self) -> int | None:
        """The pid of the session script running the command, once it said it."""
        return shell.Control(self.run_id, self.stderr).pid

    def wait_for(self, expect: Sequence[str], timeout_s: float | None = None) -> tuple[str, str] | None:
        """Blocks until one of ``expect`` shows in the unread output: answers it and the output
        before it (read through the match). ``None`` once the command ended without one;
        ``TimeoutError`` when neither happened within ``timeout_s`` (the command runs on)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._changed:
            while True:
                found = [(self._unread.find(text), text) for text in expect if text and text in self._unread]
                if found:
                    start, text = min(found)
                    before, self._unread = self._unread[:start], self._unread[start + len(text) :]
                    return text, before
                if self._finished:
                    return None
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    raise TimeoutError(f"none of {list(expect)!r} within {timeout_s} s")
                self._changed.wait(remaining)

    def wait_finished(self, timeout_s: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: self._finished, timeout_s)

    def take_output(self) -> str:
        """The output not read yet; reading it empties it."""
        with self._changed:
            output, self._unread = self._unread, ""
            return output
