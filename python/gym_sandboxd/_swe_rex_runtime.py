"""SWE-ReX's runtime on gym-sandboxd (``GymSandboxdRuntime``): the runtime of ``swe_rex``'s deployment.

SWE-ReX's calls (bash sessions with ``expect``, interactive programs and interrupts, ``execute``,
files) mapped onto the daemon's exec and file routes, raising SWE-ReX's own exceptions. The shell
side is in ``_swe_rex_shell``, commands that outlive their call in ``_swe_rex_running``.
"""

from __future__ import annotations

import asyncio
import io
import logging
import posixpath
import shlex
import stat
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from swerex.exceptions import (
    BashIncorrectSyntaxError,
    CommandTimeoutError,
    NoExitCodeError,
    NonZeroExitCodeError,
    SessionDoesNotExistError,
    SessionExistsError,
    SwerexException,
)
from swerex.runtime.abstract import (
    AbstractRuntime,
    BashAction,
    BashInterruptAction,
    BashObservation,
    CloseBashSessionResponse,
    CloseResponse,
    Command,
    CommandResponse,
    CreateBashSessionRequest,
    CreateBashSessionResponse,
    IsAliveResponse,
    ReadFileRequest,
    ReadFileResponse,
    UploadRequest,
    UploadResponse,
    WriteFileRequest,
    WriteFileResponse,
)

from . import _swe_rex_shell as shell
from ._swe_rex_running import HeldCommand
from .client import GymClient
from .errors import CapabilityUnsupportedError, FileNotFoundInSandboxError
from .schema import ExecResult

__all__ = ["CommandEndedError", "GymSandboxdRuntime", "RequestReplayedError"]

# SWE-ReX's "no timeout": the daemon's longest (24 h); the sandbox's lease still bounds it.
NO_TIMEOUT_MS = 24 * 3600 * 1000
# SWE-ReX gives a session's start-up 1 s by default (a local bash); one exec into a container on a
# busy host can take that alone, so start-up gets at least this.
MIN_STARTUP_TIMEOUT_S = 30.0
# How long an interrupt waits for the command to end after each signal, at least (SWE-ReX's own
# 0.2 s is for a local terminal; here each signal is an exec).
MIN_INTERRUPT_WAIT_S = 5.0
_T = TypeVar("_T")


class RequestReplayedError(SwerexException, RuntimeError):
    """The same call reached the sandbox twice (a retry after a broken connection): it ran once,
    and the answer of that run was lost with the connection. It is not run again."""


class CommandEndedError(SwerexException, RuntimeError):
    """The command could not finish: killed from outside, out of memory, or its sandbox is gone."""


def _timeout_ms(timeout_s: float | None) -> int:
    return NO_TIMEOUT_MS if timeout_s is None else max(1, min(NO_TIMEOUT_MS, round(timeout_s * 1000)))


def _ended(result: ExecResult, what: str) -> CommandEndedError:
    reason = f" ({result['reason']})" if "reason" in result else ""
    return CommandEndedError(f"{what} ended with status {result['status']}{reason}")


class _Session:
    def __init__(self, name: str, state_dir: str) -> None:
        self.name = name
        self.state_dir = state_dir
        self.lock = threading.Lock()
        self.held: HeldCommand | None = None



class GymSandboxdRuntime(AbstractRuntime):
    """SWE-ReX's runtime in one sandbox of the daemon (made by :class:`GymSandboxdDeployment`).

    A session is a state file in the sandbox, not a long-lived shell: each command runs as one
    exec (so its timeout kills everything it started) after the session's working directory,
    variables, functions, aliases and shell options are loaded, and saves them when it ends.
    """

    def __init__(
        self,
        client: GymClient,
        sandbox_id: str,
        *,
        max_output_bytes: int | None = None,
        max_read_bytes: int = 64 * 1024 * 1024,
        workdir: str | None = None,
        logger: logging.Logger | None = None,
    ) -> None:
        self.logger = logger or logging.getLogger("rex-runtime")
        self._client = client
        self.sandbox_id = sandbox_id
        self._max_output_bytes = max_output_bytes
        self._max_read_bytes = max_read_bytes
        # Where a relative path of `read_file`, `write_file` or `upload` is taken from (SWE-ReX's
        # server takes it from its own working directory).
        self._workdir = workdir or "/"
        self._sessions: dict[str, _Session] = {}
        self._sessions_lock = threading.Lock()
        # Where `execute` claims its run ids (see _swe_rex_shell).
        self._execute_runs = f"{shell.STATE_ROOT}/execute-{uuid.uuid4().hex}"
        # Every exec but a streamed one goes through one daemon session (a shell attached to the
        # sandbox): tens of milliseconds less a command than a `docker exec`, with the same timeout
        # kill; each command still runs in a process of its own (a provider without sessions runs
        # it one-shot). A streamed exec does not: through a session its output comes only at its
        # end (measured on Docker), and `expect` must see it as it comes.
        self._exec_session = f"swe-rex-{uuid.uuid4().hex[:12]}"

    @staticmethod
    async def _off_loop(function: Callable[[], _T]) -> _T:
        # SWE-agent calls each method in an `asyncio.run` of its own: the blocking client runs in a
        # thread, so nothing of ours is tied to one event loop.
        return await asyncio.to_thread(function)

    def _exec(self, argv: list[str], timeout_ms: int, **options: Any) -> ExecResult:
        return self._client.exec(
            self.sandbox_id, argv, session=self._exec_session, timeout_ms=timeout_ms,
            max_output_bytes=self._max_output_bytes, **options,
        )  # fmt: skip

    async def is_alive(self, *, timeout: float | None = None) -> IsAliveResponse:
        def check() -> IsAliveResponse:
            try:
                state = self._client.get_sandbox(self.sandbox_id)["state"]
            except Exception as error:  # noqa: BLE001 - SWE-ReX answers a failure, never raises
                return IsAliveResponse(is_alive=False, message=f"sandbox {self.sandbox_id}: {error}")
            if state != "ready":
                return IsAliveResponse(is_alive=False, message=f"sandbox {self.sandbox_id} is {state}")
            return IsAliveResponse(is_alive=True)

        return await self._off_loop(check)

    # Sessions.

    def _session(self, name: str) -> _Session:
        with self._sessions_lock:
            session = self._sessions.get(name)
        if session is None:
            raise SessionDoesNotExistError(f"session {name!r} does not exist")
        return session

    async def create_session(self, request: CreateBashSessionRequest) -> CreateBashSessionResponse:  # type: ignore[override]
        """Starts a session: its ``startup_source`` files sourced, its state saved for the next commands."""

        def create() -> CreateBashSessionResponse:
            with self._sessions_lock:
                if request.session in self._sessions:
                    raise SessionExistsError(f"session {request.session} already exists")
                session = _Session(request.session, f"{shell.STATE_ROOT}/session-{uuid.uuid4().hex}")
                self._sessions[request.session] = session
            try:
                startup = " ; ".join(f"source {shlex.quote(path)}" for path in request.startup_source) or ":"
                timeout_s = max(request.startup_timeout, MIN_STARTUP_TIMEOUT_S)
                observation = self._run(session, BashAction(command=startup, session=request.session, timeout=timeout_s, check="ignore"))
            except BaseException:
                with self._sessions_lock:
                    self._sessions.pop(request.session, None)
                raise
            return CreateBashSessionResponse(output=observation.output)

        return await self._off_loop(create)

    async def run_in_session(self, action: BashAction | BashInterruptAction) -> BashObservation:  # type: ignore[override]
        """Runs a command in the session (or interrupts the one still running in it).

        Raises SWE-ReX's ``CommandTimeoutError`` (every process of the command killed),
        ``BashIncorrectSyntaxError`` (nothing ran), ``NonZeroExitCodeError`` (``check="raise"``),
        ``NoExitCodeError`` (``check="raise"`` on a command an ``expect`` string left running),
        ``SessionDoesNotExistError``; :class:`RequestReplayedError`, :class:`CommandEndedError`.
        """
        session = self._session(action.session)
        if isinstance(action, BashInterruptAction):
            return await self._off_loop(lambda: self._interrupt(session, action))
        if action.is_interactive_command or action.is_interactive_quit:
            return await self._off_loop(lambda: self._interact(session, action))
        return await self._off_loop(lambda: self._run(session, action))

    def _run(self, session: _Session, action: BashAction) -> BashObservation:
        with session.lock:
            if session.held is not None and not session.held.finished:
                raise CapabilityUnsupportedError(
                    f"a command is still running in session {session.name!r} (an `expect` string "
                    "matched before it ended): send it input (is_interactive_command) or interrupt "
                    "it (BashInterruptAction) before the next command"
                )
            # What a command `expect` left running printed after it, until it ended by itself,
            # comes before this command's output, as it would on SWE-ReX's terminal.
            earlier = session.held.take_output() if session.held is not None else ""
            session.held = None
            run_id = uuid.uuid4().hex
            # A command that may outlive this call (`expect`) reads a pipe that input can be sent to.
            argv = shell.session_argv(session.state_dir, run_id, action.command, takes_input=bool(action.expect))
            timeout_ms = _timeout_ms(action.timeout)
            if action.expect:
                held = HeldCommand(self._client, self.sandbox_id, argv, run_id, timeout_ms, self._max_output_bytes)
                matched = held.wait_for(action.expect)
                if matched is not None:
                    session.held = held
                    return self._still_running(action, matched)
                if held.error is not None:
                    raise held.error
                result, output, stderr = held.result, held.take_output(), held.stderr
            else:
                result = self._exec(argv, timeout_ms)
                output, stderr = result["stdout"], result["stderr"]
            return self._observation(action, run_id, result, earlier + output, stderr)

    def _interact(self, session: _Session, action: BashAction) -> BashObservation:
        """A line for the program running in the session (started by an ``expect``), or, with none
        running, a program to start, as typed at SWE-ReX's prompt. Answers at one of ``expect`` or
        when the program ends, with exit code 0 as SWE-ReX does; ``CommandTimeoutError`` when
        neither came within ``timeout`` (the program runs on, to be interrupted)."""
        with session.lock:
            held = session.held if session.held is not None and not session.held.finished else None
            if held is None:
                run_id = uuid.uuid4().hex
                argv = shell.session_argv(session.state_dir, run_id, action.command, takes_input=True)
                # The program lives until it ends, is interrupted or the session closes, within the lease.
                held = HeldCommand(self._client, self.sandbox_id, argv, run_id, NO_TIMEOUT_MS, self._max_output_bytes)
            else:
                pipe = shell.input_path(session.state_dir, held.run_id)
                sent = self._exec(shell.send_argv(pipe, action.command), timeout_ms=30_000)
                if sent["exitCode"] != 0:
                    raise CommandEndedError(f"the program of session {session.name!r} takes no input (its standard input is gone)")
            session.held = held
            try:
                matched = held.wait_for(action.expect, timeout_s=action.timeout)
            except TimeoutError as error:
                raise CommandTimeoutError(f"timeout after {action.timeout} seconds while running command {action.command!r}") from error
            if matched is not None:
                return BashObservation(output=matched[1], exit_code=0, expect_string=matched[0])
            session.held = None
            if held.error is not None:
                raise held.error
            self._check_ended(action, held.run_id, held.result, held.stderr)
            return BashObservation(output=held.take_output(), exit_code=0, expect_string=shell.PS1)

    def _still_running(self, action: BashAction, matched: tuple[str, str]) -> BashObservation:
        expect_string, output = matched
        if action.check == "raise":
            raise NoExitCodeError(
                f"{action.command!r} printed {expect_string!r} and is still running: it has no exit code "
                f"yet. Here is the output:\n{output!r}"
            )
        return BashObservation(output=output, exit_code=None, expect_string=expect_string)

    @staticmethod
    def _check_ended(action: BashAction, run_id: str, result: ExecResult | None, stderr: str) -> ExecResult:
        """The result of a session command that ran to its own end; raises for a session command that did not run to its own end: timed out, sent twice,
        refused by bash's syntax check, or ended from outside."""
        if result is None:
            raise CommandEndedError(f"{action.command!r}: the daemon's stream ended without a result")
        if result["status"] == "timeout":
            raise CommandTimeoutError(f"timeout after {action.timeout} seconds while running command {action.command!r}")
        control = shell.Control(run_id, stderr)
        if control.replayed:
            raise RequestReplayedError(f"{action.command!r} was sent twice; it ran once and its answer was lost")
        if result["status"] != "ok":
            raise _ended(result, f"{action.command!r}")
        if control.syntax_error is not None:
            message = f"bash found a syntax error in {action.command!r}:\n{control.syntax_error}"
            raise BashIncorrectSyntaxError(message, extra_info={"bash_stdout": "", "bash_stderr": control.syntax_error})
        return result

    def _observation(self, action: BashAction, run_id: str, result: ExecResult | None, output: str, stderr: str) -> BashObservation:
        result = self._check_ended(action, run_id, result, stderr)
        exit_code = None if action.check == "ignore" else result["exitCode"]
        if action.check == "raise" and exit_code != 0:
            message = f"Command {action.command!r} failed with exit code {exit_code}. Here is the output:\n{output!r}"
            raise NonZeroExitCodeError(f"{action.error_msg}: {message}" if action.error_msg else message)
        return BashObservation(output=output, exit_code=exit_code, expect_string=shell.PS1)

    def _interrupt(self, session: _Session, action: BashInterruptAction, *, kill: bool = False) -> BashObservation:
        """Ctrl-C to the command an ``expect`` left running: SIGINT to it and what it started, up
        to ``n_retry`` times, until it ends or shows one of the action's ``expect`` (a prompt it
        came back to: it then stays running), then SIGKILL (at once with ``kill``). Nothing
        running: an empty observation, as at a prompt."""
        with session.lock:
            held, session.held = session.held, None
            if held is None:
                return BashObservation(output="", exit_code=0, expect_string=shell.PS1)
            wait_s = max(action.timeout, MIN_INTERRUPT_WAIT_S)
            signals = ["KILL"] if kill else ["INT"] * max(1, action.n_retry) + ["KILL"]
            for signal in signals:
                if held.pid is not None and not held.finished:
                    self._exec(shell.signal_argv(held.pid, signal), timeout_ms=30_000)
                try:
                    matched = held.wait_for([] if signal == "KILL" else action.expect, timeout_s=wait_s)
                except TimeoutError:
                    continue
                if matched is not None:
                    session.held = held
                    return BashObservation(output=matched[1], exit_code=0, expect_string=matched[0])
                break
            else:
                # What escaped the command's process tree (setsid and a double fork): every
                # process of the sandbox but its keeper, as a killed container would.
                self._client.stop_processes(self.sandbox_id)
                if not held.wait_finished(wait_s):
                    raise CommandTimeoutError(f"could not interrupt the command of session {session.name!r}")
            return BashObservation(output=held.take_output(), exit_code=0, expect_string=shell.PS1)

    async def close_session(self, request: Any) -> CloseBashSessionResponse:
        """Ends the session: a command still running in it is killed, its state removed."""
        session = self._session(request.session)

        def close() -> CloseBashSessionResponse:
            self._end_session(session)
            with self._sessions_lock:
                self._sessions.pop(session.name, None)
            return CloseBashSessionResponse()

        return await self._off_loop(close)

    def _end_session(self, session: _Session) -> None:
        self._interrupt(session, BashInterruptAction(session=session.name), kill=True)
        self._exec(["rm", "-rf", session.state_dir], timeout_ms=30_000)

    # One-shot commands and files.

    def _path(self, path: str) -> str:
        return posixpath.join(self._workdir, path)

    async def execute(self, command: Command) -> CommandResponse:
        """Runs ``command`` as ``subprocess.run`` would (``shell``, ``env`` replacing the environment,
        ``cwd``, ``merge_output_streams``), outside any session. ``CommandTimeoutError`` past its
        ``timeout`` (every process killed); ``NonZeroExitCodeError`` with ``check``."""

        def run() -> CommandResponse:
            run_id = uuid.uuid4().hex
            argv = shell.execute_argv(
                self._execute_runs, run_id, command.command,
                shell=command.shell, env=command.env, merge_output=command.merge_output_streams,
            )  # fmt: skip
            result = self._exec(argv, _timeout_ms(command.timeout), cwd=command.cwd)
            if result["status"] == "timeout":
                raise CommandTimeoutError(f"Timeout ({command.timeout}s) exceeded while running command")
            control = shell.Control(run_id, result["stderr"])
            if control.replayed:
                raise RequestReplayedError(f"{command.command!r} was sent twice; it ran once and its answer was lost")
            if result["status"] != "ok":
                raise _ended(result, f"{command.command!r}")
            response = CommandResponse(stdout=result["stdout"], stderr=result["stderr"], exit_code=result["exitCode"])
            if command.check and response.exit_code != 0:
                message = (
                    f"Command {command.command!r} failed with exit code {response.exit_code}. "
                    f"Stdout:\n{response.stdout!r}\nStderr:\n{response.stderr!r}"
                )
                raise NonZeroExitCodeError(f"{command.error_msg}: {message}" if command.error_msg else message)
            return response

        return await self._off_loop(run)

    async def read_file(self, request: ReadFileRequest) -> ReadFileResponse:
        """The file as text, decoded as ``Path.read_text(encoding, errors)`` decodes; ``FileNotFoundError``
        when missing, :class:`~gym_sandboxd.errors.FileTooLargeError` past ``max_read_bytes``."""

        def read() -> ReadFileResponse:
            try:
                data = self._client.read_file_bytes(self.sandbox_id, self._path(request.path), max_bytes=self._max_read_bytes)
            except FileNotFoundInSandboxError as error:
                raise FileNotFoundError(f"No such file in sandbox {self.sandbox_id}: {request.path!r}") from error
            text = io.TextIOWrapper(io.BytesIO(data), encoding=request.encoding or "utf-8", errors=request.errors)
            return ReadFileResponse(content=text.read())

        return await self._off_loop(read)

    async def write_file(self, request: WriteFileRequest) -> WriteFileResponse:
        """Writes the text (UTF-8), parent folders made."""
        data = request.content.encode("utf-8")
        await self._off_loop(lambda: self._client.write_file(self.sandbox_id, self._path(request.path), data))
        return WriteFileResponse()

    async def upload(self, request: UploadRequest) -> UploadResponse:
        """A local file to ``target_path`` (its mode kept), or a local folder's contents into it."""
        source = Path(request.source_path).resolve()

        def upload() -> None:
            if source.is_dir():
                self._client.upload_directory(self.sandbox_id, source, self._path(request.target_path))
            elif source.is_file():
                mode = stat.S_IMODE(source.stat().st_mode)
                self._client.write_file(self.sandbox_id, self._path(request.target_path), source, mode=mode)
            else:
                raise ValueError(f"Source path {source} is not a file or directory")

        await self._off_loop(upload)
        return UploadResponse()

    async def close(self) -> CloseResponse:
        """Ends every session (a command still running in one is killed); the sandbox stays (``stop`` of the deployment destroys it)."""

        def close() -> None:
            with self._sessions_lock:
                sessions, self._sessions = list(self._sessions.values()), {}
            for session in sessions:
                with session.lock:
                    held = session.held
                if held is not None and not held.finished:
                    self._interrupt(session, BashInterruptAction(session=session.name), kill=True)

        await self._off_loop(close)
        return CloseResponse()
