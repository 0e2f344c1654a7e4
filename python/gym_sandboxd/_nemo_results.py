"""How the daemon's exec results read as NeMo Gym's ``SandboxExecResult`` (the provider's ``exec``)."""

from __future__ import annotations

from ._nemo_types import SandboxExecResult
from .schema import ExecResult

# NeMo Gym's providers answer this code (with error_type set) when no process exit code exists:
# the command timed out, or the sandbox is gone. 137 is 128 + SIGKILL, what a killed process exits with.
SANDBOX_RUNTIME_RETURN_CODE = 125
KILLED_RETURN_CODE = 137


def _exec_result(result: ExecResult, timeout_s: float) -> SandboxExecResult:
    status = result["status"]
    stdout, stderr = result["stdout"], result["stderr"]
    if status == "ok":
        return SandboxExecResult(stdout=stdout, stderr=stderr, return_code=int(result["exitCode"] or 0))
    # A sandbox the command itself took down (its keeper OOM-killed, its first process ended):
    # the command's own failure, said with the daemon's reason so the agent's log shows why.
    lost = f"; the sandbox did not survive it: {result.get('reason') or 'no reason given'}" if result.get("sandboxLost") else ""
    if status == "timeout":
        note = f"command timed out after {timeout_s:g}s; every process it started was killed{lost}"
        return SandboxExecResult(stdout=stdout, stderr=_joined(stderr, note), return_code=SANDBOX_RUNTIME_RETURN_CODE, error_type="timeout")
    if status == "sandbox_gone":
        return SandboxExecResult(
            stdout=stdout, stderr=_joined(stderr, "the sandbox is gone"), return_code=SANDBOX_RUNTIME_RETURN_CODE, error_type="sandbox"
        )
    # Killed (by a signal, or the kernel for memory): a process that ran and exited as a killed one does.
    code = result["exitCode"] if result["exitCode"] is not None else KILLED_RETURN_CODE
    note = ("killed: out of memory" if status == "oom" else "killed by a signal") + lost
    return SandboxExecResult(stdout=stdout, stderr=_joined(stderr, note), return_code=int(code))


def _joined(stderr: str, note: str) -> str:
    return f"{stderr.rstrip()}\n{note}" if stderr.strip() else note
