"""One of NeMo Gym's own sandbox-using servers, end to end on our provider: Terminal-Bench 2.1's
resources server (``resources_servers/terminal_bench_2_1`` of the installed package), its web app
driven over its own routes. It resolves ``sandbox_provider: sandbox`` from NeMo Gym's global
config (handed over as ``ng_run`` hands it to a server process, in ``NEMO_GYM_CONFIG_DICT``),
starts the sandbox with its set-up commands, uploads the task's files one by one, runs the
solution (with ``preserve_background_services``) and the tests, and reads the reward from a file
it downloads. No model is involved: the resources server only verifies.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import RUN_LABEL

from gym_sandboxd import GymClient

# A task in Terminal-Bench's layout: tests/test.sh writes the reward; solution/solve.sh solves it
# by leaving a service running (which must outlive the command that started it) and an answer.
TEST_SH = """#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /srv/answer 2>/dev/null)" = 42 ] && kill -0 "$(cat /srv/service.pid 2>/dev/null)" 2>/dev/null; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
echo verified
"""
SOLVE_SH = """#!/bin/bash
mkdir -p /srv
nohup sh -c 'while :; do sleep 1; done' >/dev/null 2>&1 &
echo $! > /srv/service.pid
echo 42 > /srv/answer
"""
TASK_NAME = "terminal-bench/answer-service"
BASH_IMAGE = os.environ.get("GYM_TEST_BASH_IMAGE", "gym/debian-base:latest")


@pytest.fixture
def task_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "answer-service"
    (folder / "tests").mkdir(parents=True)
    (folder / "solution").mkdir()
    (folder / "tests" / "test.sh").write_text(TEST_SH)
    (folder / "solution" / "solve.sh").write_text(SOLVE_SH)
    return folder


@pytest.fixture
def nemo_gym_config(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """NeMo Gym's merged config with our provider as its ``sandbox:`` block, as a server process gets it."""
    from nemo_gym import global_config
    from omegaconf import OmegaConf

    merged = {"sandbox": {"gym_sandboxd": {}, "default_metadata": {"sandbox-api": "gym-sandboxd"}}}
    monkeypatch.setattr(global_config, "_GLOBAL_CONFIG_DICT", None)
    monkeypatch.setenv(global_config.NEMO_GYM_CONFIG_DICT_ENV_VAR_NAME, OmegaConf.to_yaml(OmegaConf.create(merged)))
    yield


def _server(golden: bool):
    from fastapi.testclient import TestClient
    from nemo_gym.server_utils import ServerClient
    from resources_servers.terminal_bench_2_1.app import (
        TerminalBench21ResourcesServer,
        TerminalBench21ResourcesServerConfig,
    )

    config = TerminalBench21ResourcesServerConfig(
        name="terminal_bench_2_1_resources_server",
        host="127.0.0.1",
        port=0,
        entrypoint="app.py",
        is_verifying_golden_patch=golden,
        evaluation_timeout=120,
        sandbox_provider="sandbox",
        sandbox_config={
            "ttl_s": 600,
            "ready_timeout_s": 60,
            "derive_cpu_env": False,
            "resources": {"cpu": 1, "memory_mib": 512},
            "metadata": {**RUN_LABEL, "case": "terminal-bench"},
        },
    )
    server = TerminalBench21ResourcesServer(config=config, server_client=ServerClient.model_construct())
    return TestClient(server.setup_webserver())


def _verify_body(task_folder: Path) -> dict:
    return {
        "responses_create_params": {"input": []},
        "response": {
            "output": [],
            "id": "",
            "created_at": 0,
            "model": "",
            "object": "response",
            "parallel_tool_calls": False,
            "tool_choice": "auto",
            "tools": [],
        },
        "task_name": TASK_NAME,
        "docker_image": BASH_IMAGE,
        "task_folder": str(task_folder),
    }


def _mine(client: GymClient) -> list[str]:
    return [item["id"] for item in client.list_sandboxes(labels={**RUN_LABEL, "case": "terminal-bench"})]


def test_terminal_bench_verifies_a_golden_solution_as_solved(client: GymClient, task_folder: Path, nemo_gym_config: None) -> None:
    with _server(golden=True) as http:
        verified = http.post("/verify", json=_verify_body(task_folder))
    assert verified.status_code == 200, verified.text
    result = verified.json()
    assert (result["reward"], result["evaluation_completed"]) == (1.0, True), result
    assert "verified" in result["test_output"]
    assert _mine(client) == []  # the server stopped its sandbox


def test_terminal_bench_verifies_an_unsolved_session_as_failed(client: GymClient, task_folder: Path, nemo_gym_config: None) -> None:
    with _server(golden=False) as http:
        seeded = http.post("/seed_session", json={"task_name": TASK_NAME, "docker_image": BASH_IMAGE, "task_folder": str(task_folder)})
        assert seeded.status_code == 200, seeded.text
        [sandbox_id] = _mine(client)
        assert seeded.json()["sandbox_handle"] == sandbox_id
        labels = client.get_sandbox(sandbox_id)["labels"]
        assert (labels["sandbox-api"], labels["instance_id"]) == ("gym-sandboxd", "terminal-bench-answer-service")
        verified = http.post("/verify", json=_verify_body(task_folder))
    assert verified.status_code == 200, verified.text
    result = verified.json()
    assert (result["reward"], result["evaluation_completed"]) == (0.0, True), result
    assert _mine(client) == []
