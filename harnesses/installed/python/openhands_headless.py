"""gym's headless runner for the OpenHands SDK agent.

Runs the SDK's default agent (the preset the OpenHands CLI runs: terminal, file editor, task
tracker, with the built-in finish and think tools) on one task, in the working directory, with no
confirmation step and no visualiser. Every event the conversation records is printed on stdout as
one JSON line, the SDK's own dump of the event (with its ``kind``); at the end the whole event list
is written to the trajectory file.

Usage: openhands_headless.py --trajectory FILE (--task TEXT | --task-file FILE) [--workdir DIR]
       [--max-iterations N]

The model comes from the environment: LLM_MODEL (a LiteLLM model name, such as
``openai/<name>`` for an OpenAI-compatible server), LLM_BASE_URL, LLM_API_KEY; optional
LLM_API_MODE (auto, chat, responses). They are taken out of the environment before the agent's
terminal starts, so the commands the agent runs do not see them.

Exit status: 0 when the agent finished (the finish tool, or a final message), 3 when it stopped
otherwise (stuck, an error, the iteration limit), 2 for a bad invocation. Whatever the SDK or
the tools write to stdout is sent to stderr, so stdout holds only events.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
from typing import Any, TextIO

EXIT_FINISHED = 0
EXIT_USAGE = 2
EXIT_NOT_FINISHED = 3
MODEL_ENV = ("LLM_MODEL", "LLM_BASE_URL", "LLM_API_KEY", "LLM_API_MODE")


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="openhands-gym", description="Run the OpenHands SDK agent headless on one task.")
    task = parser.add_mutually_exclusive_group(required=True)
    task.add_argument("--task", help="the task, as the user's first message")
    task.add_argument("--task-file", help="a file holding the task (UTF-8)")
    parser.add_argument("--trajectory", required=True, help="file to write the event list to (JSON)")
    parser.add_argument("--workdir", default=None, help="the agent's working directory (default: the current one)")
    parser.add_argument(
        "--max-iterations", type=int, default=None, help="steps before the run stops (default: the SDK's)"
    )
    return parser.parse_args(argv)


def take_model_settings() -> dict[str, str]:
    """Reads the model's settings and removes them from the environment the agent's commands inherit."""
    settings = {name: os.environ.pop(name, "") for name in MODEL_ENV}
    missing = [name for name in ("LLM_MODEL", "LLM_BASE_URL") if settings[name] == ""]
    if missing:
        print(f"openhands-gym: set {' and '.join(missing)} (the model to use)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)
    return settings


def keep_files_at_home() -> None:
    """Settles what the SDK reads at import, and keeps its scratch files under HOME.

    Without network, LiteLLM's fetch of its price list retries for seconds: it reads the copy it
    ships instead. The file editor keeps its undo history in a temporary folder: under HOME, not
    the system's /tmp (set for this process only, so the agent's commands keep their TMPDIR). So
    does tmux its socket, when the image has tmux and the terminal uses it: TMUX_TMPDIR, which the
    agent's commands do inherit (a tmux they start themselves puts its socket there too).
    """
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("OPENHANDS_SUPPRESS_BANNER", "1")
    scratch = os.path.join(os.path.expanduser("~"), "tmp")
    os.makedirs(scratch, mode=0o700, exist_ok=True)
    tempfile.tempdir = scratch
    os.environ.setdefault("TMUX_TMPDIR", scratch)


def stdout_for_events() -> TextIO:
    """A private copy of stdout for the events; fd 1 itself then goes to stderr."""
    events = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return events


def write_trajectory(path: str, events: list[dict[str, Any]], status: str, error: str = "") -> None:
    """The run's status (the SDK's execution status, or "terminated"), why it failed, its events."""
    record: dict[str, Any] = {"status": status}
    if error:
        record["error"] = error
    record["events"] = events
    temporary = f"{path}.partial"
    with open(temporary, "w", encoding="utf-8") as file:
        json.dump(record, file)
    os.replace(temporary, path)


def main(argv: list[str]) -> int:
    arguments = parse_arguments(argv)
    workdir = os.path.abspath(arguments.workdir or os.getcwd())
    if not os.path.isdir(workdir):
        print(f"openhands-gym: no such directory: {workdir}", file=sys.stderr)
        return EXIT_USAGE
    if arguments.task_file is not None:
        with open(arguments.task_file, encoding="utf-8") as file:
            task = file.read()
    else:
        task = arguments.task
    settings = take_model_settings()
    keep_files_at_home()
    out = stdout_for_events()

    # Imported after the environment is settled: the SDK reads some of it at import.
    from pydantic import SecretStr

    from openhands.sdk import LLM, Conversation
    from openhands.sdk.conversation.exceptions import ConversationRunError
    from openhands.sdk.conversation.state import ConversationExecutionStatus
    from openhands.tools.preset.default import get_default_agent

    llm_options: dict[str, Any] = {
        "model": settings["LLM_MODEL"],
        "base_url": settings["LLM_BASE_URL"],
        "usage_id": "agent",
    }
    if settings["LLM_API_KEY"] != "":
        llm_options["api_key"] = SecretStr(settings["LLM_API_KEY"])
    if settings["LLM_API_MODE"] != "":
        llm_options["api_mode"] = settings["LLM_API_MODE"]
    llm = LLM(**llm_options)
    # The CLI's preset: no browser tools.
    agent = get_default_agent(llm=llm, cli_mode=True)

    dumped: list[dict[str, Any]] = []

    def on_event(event: Any) -> None:
        data = event.model_dump(mode="json")
        dumped.append(data)
        out.write(json.dumps(data, ensure_ascii=False) + "\n")

    conversation_options: dict[str, Any] = {
        "agent": agent,
        "workspace": workdir,
        "callbacks": [on_event],
        "visualizer": None,
    }
    if arguments.max_iterations is not None:
        conversation_options["max_iteration_per_run"] = arguments.max_iterations

    status = "error"
    conversation = None

    def on_terminate(signum: int, _frame: Any) -> None:
        # Killed at the time limit: keep what was done so far.
        write_trajectory(arguments.trajectory, list(dumped), "terminated")
        os._exit(128 + signum)

    signal.signal(signal.SIGTERM, on_terminate)
    message = ""
    try:
        conversation = Conversation(**conversation_options)
        conversation.send_message(task)
        conversation.run()
        status = conversation.state.execution_status.value
    except ConversationRunError as error:
        status = "error"
        message = str(error.original_exception)
    except Exception as error:  # noqa: BLE001 - the agent could not start (no bash in the image, say)
        status = "error"
        message = f"{type(error).__name__}: {error}"
    finally:
        if conversation is not None:
            try:
                conversation.close()
            except Exception as error:  # noqa: BLE001 - closing never hides how the run ended
                print(f"openhands-gym: closing the conversation failed: {error}", file=sys.stderr)
        write_trajectory(arguments.trajectory, dumped, status, message)
        out.flush()
    if status == ConversationExecutionStatus.FINISHED.value:
        return EXIT_FINISHED
    print(
        f"openhands-gym: the agent did not finish: the conversation ended {status}" + (f": {message}" if message else ""),
        file=sys.stderr,
    )
    return EXIT_NOT_FINISHED


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
