"""mini-SWE-agent's environment class on a real daemon, driven as mini-SWE-agent drives it.

mini-SWE-agent itself is not installed here (its own agent loop runs it in
``test/mini-swe-agent-environment.int.test.ts``); these check the contract piece by piece: the
result's shape and wording, merged output, the submission sentinel, timeouts that kill, template
variables and serialization without the token, refusals before anything is allocated, and a
sandbox that never outlives its environment (close, garbage collection, interpreter exit).
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import RUN_LABEL

from gym_sandboxd import GymClient
from gym_sandboxd import errors as gym_errors
from gym_sandboxd.mini_swe_agent import GymSandboxdEnvironment

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
# busybox (the tests' default image) has no bash: commands go through its sh.
SH = ["sh", "-c"]


@pytest.fixture
def environment(image: str):
    env = GymSandboxdEnvironment(image=image, interpreter=SH, cwd="/tmp", labels=dict(RUN_LABEL), timeout=20)
    yield env
    env.close()


def _is_gone(client: GymClient, sandbox_id: str) -> bool:
    try:
        client.get_sandbox(sandbox_id)
    except gym_errors.SandboxNotFoundError:
        return True
    return False


def test_result_shape_merged_output_exit_codes_cwd_and_env(environment: GymSandboxdEnvironment, monkeypatch: pytest.MonkeyPatch) -> None:
    assert environment.execute({"command": "echo out; echo err >&2; echo out2"}) == {
        "output": "out\nerr\nout2\n",
        "returncode": 0,
        "exception_info": "",
    }
    assert environment.execute({"command": "exit 3"}) == {"output": "", "returncode": 3, "exception_info": ""}
    assert environment.execute({"command": "pwd"})["output"] == "/tmp\n"
    assert environment.execute({"command": "pwd"}, cwd="/etc")["output"] == "/etc\n"
    # A missing directory is a failed command, as `docker exec -w` makes it, not an error.
    missing = environment.execute({"command": "pwd"}, cwd="/no/such/dir")
    assert missing["returncode"] != 0 and missing["exception_info"] == ""
    # No command at all runs nothing, as mini-SWE-agent's environments do.
    assert environment.execute({}) == {"output": "", "returncode": 0, "exception_info": ""}


def test_env_and_forward_env(image: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("P32_FORWARDED", "from-host")
    monkeypatch.setenv("P32_BOTH", "host-loses")
    monkeypatch.setenv("P32_NOT_FORWARDED", "secret")
    with GymSandboxdEnvironment(
        image=image,
        interpreter=SH,
        labels=dict(RUN_LABEL),
        env={"P32_BOTH": "config-wins", "PAGER": "cat"},
        forward_env=["P32_FORWARDED", "P32_BOTH", "P32_UNSET"],
    ) as env:
        result = env.execute({"command": 'echo "$P32_FORWARDED $P32_BOTH $PAGER [${P32_NOT_FORWARDED-}] [${P32_UNSET-none}]"'})
    assert result["output"] == "from-host config-wins cat [] [none]\n"


def test_a_timeout_is_minus_one_with_what_was_printed_and_kills_what_it_started(environment: GymSandboxdEnvironment) -> None:
    result = environment.execute({"command": "echo started; (sleep 300 &) ; sleep 300; echo never"}, timeout=2)
    assert result["returncode"] == -1
    assert result["output"] == "started\n"
    assert result["exception_info"] == (
        "An error occurred while executing the command: Command 'echo started; (sleep 300 &) ; sleep 300; echo never'"
        " timed out after 2 seconds (the command and every process it started were killed)"
    )
    assert result["extra"]["exception_type"] == "TimeoutExpired"
    # Neither the command's sleep nor the one it left in the background lives on.
    processes = environment.execute({"command": "ps -o args || ps"})["output"]
    assert "sleep 300" not in processes
    # The config's timeout applies when execute gives none.
    with GymSandboxdEnvironment(image=environment.config.image, interpreter=SH, labels=dict(RUN_LABEL), timeout=1) as short:
        assert short.execute({"command": "sleep 30"})["returncode"] == -1


def test_the_submission_sentinel(environment: GymSandboxdEnvironment) -> None:
    with pytest.raises(Exception) as caught:
        environment.execute({"command": "printf '\\n  COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT  \\ndiff --git a/x b/x\\n+fixed\\n'"})
    assert type(caught.value).__name__ in {"Submitted", "_SubmittedStandIn"}
    assert caught.value.messages == (  # type: ignore[attr-defined]
        {
            "role": "exit",
            "content": "diff --git a/x b/x\n+fixed\n",
            "extra": {"exit_status": "Submitted", "submission": "diff --git a/x b/x\n+fixed\n"},
        },
    )
    # Not a submission: a failed command, or the sentinel after other output.
    failed = environment.execute({"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; exit 1"})
    assert failed["returncode"] == 1
    later = environment.execute({"command": "echo first; echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"})
    assert later["returncode"] == 0


def test_template_vars_and_serialize_never_carry_the_token(image: str, client: GymClient) -> None:
    token = client.address.token
    with GymSandboxdEnvironment(image=image, interpreter=SH, labels=dict(RUN_LABEL), url=client.address.url, token=token) as env:
        variables = env.get_template_vars(task="fix it", cwd="/override")
        serialized = env.serialize()
        assert env.execute({"command": "echo ok"})["output"] == "ok\n"
    assert token and token not in repr(variables) and token not in repr(serialized)
    assert "token" not in variables and "token" not in serialized["info"]["config"]["environment"]
    # The sandbox's own uname (what the model's commands run on); kwargs win.
    assert variables["system"] == "Linux" and variables["machine"] and variables["release"]
    assert variables["task"] == "fix it" and variables["cwd"] == "/override" and variables["timeout"] == 30
    assert serialized["info"]["config"]["environment_type"] == "gym_sandboxd.mini_swe_agent.GymSandboxdEnvironment"
    assert serialized["info"]["config"]["environment"]["image"] == image


def test_refusals_come_before_any_sandbox(image: str, client: GymClient) -> None:
    before = len(client.list_sandboxes(labels=RUN_LABEL))
    with pytest.raises(ValueError, match="run_args"):
        GymSandboxdEnvironment(image=image, labels=dict(RUN_LABEL), run_args=["--gpus", "all"])
    with pytest.raises(ValueError, match="does not take `executable`"):
        GymSandboxdEnvironment(image=image, labels=dict(RUN_LABEL), executable="podman")
    with pytest.raises(ValueError, match="does not take `imgae`"):
        GymSandboxdEnvironment(imgae=image, labels=dict(RUN_LABEL))
    with pytest.raises(ValueError, match="exactly one of `image` or `pool`"):
        GymSandboxdEnvironment(labels=dict(RUN_LABEL))
    with pytest.raises(ValueError, match="belong to the pool"):
        GymSandboxdEnvironment(pool="p", resources={"cpus": 1})
    with pytest.raises(ValueError, match="timeout"):
        GymSandboxdEnvironment(image=image, timeout=0)
    # The daemon's own refusal (an image it does not have) is its typed error.
    with pytest.raises(gym_errors.GymError):
        GymSandboxdEnvironment(image="gym/no-such-image:missing", labels=dict(RUN_LABEL))
    assert len(client.list_sandboxes(labels=RUN_LABEL)) == before


def test_close_is_idempotent_and_destroys_the_sandbox(image: str, client: GymClient) -> None:
    env = GymSandboxdEnvironment(image=image, interpreter=SH, labels=dict(RUN_LABEL))
    sandbox_id = env.sandbox_id
    assert client.get_sandbox(sandbox_id)["labels"]["mini-swe-agent"] == "1"
    env.close()
    env.cleanup()
    assert _is_gone(client, sandbox_id)
    after = env.execute({"command": "echo hi"})
    assert after["returncode"] == -1 and "closed" in after["exception_info"]


def test_garbage_collection_destroys_the_sandbox(image: str, client: GymClient) -> None:
    env = GymSandboxdEnvironment(image=image, interpreter=SH, labels=dict(RUN_LABEL))
    sandbox_id = env.sandbox_id
    del env
    gc.collect()
    assert _is_gone(client, sandbox_id)


def test_interpreter_exit_destroys_the_sandbox(image: str, client: GymClient) -> None:
    """A program that never closes its environment (mini-SWE-agent's CLI does not) leaks nothing."""
    program = (
        f"import sys; sys.path.insert(0, {str(PACKAGE_ROOT)!r})\n"
        "from gym_sandboxd.mini_swe_agent import GymSandboxdEnvironment\n"
        f"env = GymSandboxdEnvironment(image={image!r}, interpreter=['sh', '-c'], labels={dict(RUN_LABEL)!r})\n"
        "KEEP = [env]\n"
        "print(env.sandbox_id, flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, env=os.environ, timeout=120)
    assert done.returncode == 0, done.stderr
    sandbox_id = done.stdout.strip()
    assert sandbox_id.startswith("sbx-")
    assert _is_gone(client, sandbox_id)


def test_a_sandbox_destroyed_from_outside_is_a_failed_command_not_a_crash(image: str, client: GymClient) -> None:
    with GymSandboxdEnvironment(image=image, interpreter=SH, labels=dict(RUN_LABEL)) as env:
        client.delete_sandbox(env.sandbox_id)
        result = env.execute({"command": "echo hi"})
    assert result["returncode"] == -1 and result["output"] == ""
    assert "SANDBOX_NOT_FOUND" in result["exception_info"]
    assert result["extra"]["exception_type"] == "SandboxNotFoundError"


def test_a_sandbox_from_a_warm_pool(image: str, client: GymClient, run_id: str) -> None:
    pool = f"mini-{run_id}"
    client.define_pool(pool, {"spec": {"image": image, "labels": dict(RUN_LABEL)}, "minIdle": 0, "maxTotal": 2})
    try:
        with GymSandboxdEnvironment(pool=pool, interpreter=SH, labels=dict(RUN_LABEL)) as env:
            assert client.get_sandbox(env.sandbox_id)["pool"] == pool
            assert env.execute({"command": "echo pooled"})["output"] == "pooled\n"
        assert _is_gone(client, env.sandbox_id)
    finally:
        client.delete_pool(pool)


def test_through_the_session_shell(image: str) -> None:
    with GymSandboxdEnvironment(image=image, interpreter=SH, labels=dict(RUN_LABEL), session=True, env={"V": "1"}) as env:
        assert env.execute({"command": "cd /etc; export W=2; echo out; echo err >&2; exit 4"}) == {
            "output": "out\nerr\n",
            "returncode": 4,
            "exception_info": "",
        }
        # Each command in a subshell of its own, as mini-SWE-agent's prompt tells the model.
        assert env.execute({"command": 'pwd; echo "$V${W-}"'})["output"] == "/\n1\n"
