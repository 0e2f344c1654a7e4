"""Fixtures for the Python package's tests, which run against a real daemon.

``test/python-package.int.test.ts`` starts one (and a second on a unix socket) on temporary state
directories with the Docker provider, then runs ``python3 -m pytest python/tests`` with
``GYM_STATE_DIR`` (and ``GYM_TEST_SOCKET_STATE_DIR``, ``GYM_TEST_IMAGE``, ``GYM_TEST_RUN``) set.
Run by hand the same way against a daemon of your own. Every sandbox a test makes carries the
label ``python-test=<run>`` and is destroyed at the end of the session.

NeMo Gym is the real package: ``test/nemo-gym.int.test.ts`` runs this suite with the Python of
the ``nemo-gym`` framework runtime (``test/frameworks/runtimes.ts``), where it is installed; or a
folder holding its source, named by ``GYM_TEST_NEMO_GYM_PATH``, goes first on ``sys.path``. Without
either (Debian's ``python3``, which the rest of the suite runs on) the tests that need NeMo Gym are
not collected. The package's entry point is published from ``pyproject.toml`` into a temporary
``.dist-info``, so NeMo Gym's registry finds the provider by name exactly as it would once the
package is installed.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import shutil
import sys
import tempfile
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
# GYM_TEST_NEMO_GYM_PATH: a folder holding NeMo Gym's ``nemo_gym`` package (a source checkout),
# for an interpreter that does not have it installed.
NEMO_GYM_PATH = os.environ.get("GYM_TEST_NEMO_GYM_PATH") or None
sys.path.insert(0, str(PACKAGE_ROOT))
if NEMO_GYM_PATH is not None:
    sys.path.insert(0, NEMO_GYM_PATH)
HAS_NEMO_GYM = importlib.util.find_spec("nemo_gym") is not None
# The tests that drive the provider through NeMo Gym itself; without it they are not collected.
collect_ignore = (
    [] if HAS_NEMO_GYM else ["test_nemo_provider.py", "test_nemo_pty.py", "test_nemo_gym_resources_server.py"]
)


def python_command(script: str, *, site: bool = True) -> list[str]:
    """This interpreter running ``script`` with the package (and a NeMo Gym source folder) importable.

    Paths go in through the script, not ``PYTHONPATH``: the framework runtime's Python runs
    isolated (``-I``) and ignores it. ``site=False`` adds ``-S`` and leaves the NeMo Gym folder out:
    no installed packages at all, NeMo Gym among them.
    """
    paths = [str(PACKAGE_ROOT)] + ([NEMO_GYM_PATH] if NEMO_GYM_PATH is not None and site else [])
    prelude = f"import sys\nsys.path[:0] = {paths!r}\n"
    return [sys.executable, *([] if site else ["-S"]), "-c", prelude + script]


def connected_script(body: str) -> str:
    """A script for another process: ``main()`` connects ``sandbox`` from the descriptor in
    ``sys.argv[1]`` (NeMo Gym's ``AsyncSandbox.connect`` with our provider), then runs ``body``
    (lines indented four spaces, inside ``main``)."""
    return (
        "import asyncio, json, sys\n"
        "from nemo_gym.sandbox import AsyncSandbox\n"
        "from gym_sandboxd.nemo_gym_provider import GymSandboxdProvider\n"
        "async def main():\n"
        "    sandbox = await AsyncSandbox.connect(json.loads(sys.argv[1]), provider=GymSandboxdProvider())\n"
        f"{body}"
        "asyncio.run(main())\n"
    )


def _publish_entry_points() -> Path:
    """A ``.dist-info`` with the entry points ``pyproject.toml`` declares, as an install writes it."""
    project = tomllib.loads((PACKAGE_ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    directory = Path(tempfile.mkdtemp(prefix="gym-python-dist-"))
    atexit.register(shutil.rmtree, directory, True)
    info = directory / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n")
    lines = []
    for group, points in project["entry-points"].items():
        lines.append(f"[{group}]")
        lines += [f"{name} = {target}" for name, target in points.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return directory


sys.path.insert(0, str(_publish_entry_points()))

from gym_sandboxd import GymClient  # noqa: E402

RUN = os.environ.get("GYM_TEST_RUN") or uuid.uuid4().hex[:8]
IMAGE = os.environ.get("GYM_TEST_IMAGE", "gym/busybox:latest")
RUN_LABEL = {"python-test": RUN}


@pytest.fixture(scope="session")
def run_id() -> str:
    return RUN


@pytest.fixture(scope="session")
def image() -> str:
    return IMAGE


@pytest.fixture(scope="session")
def client() -> Iterator[GymClient]:
    with GymClient() as gym:
        yield gym
        for sandbox in gym.list_sandboxes(labels=RUN_LABEL):
            gym.delete_sandbox(sandbox["id"])


@pytest.fixture
def sandbox_id(client: GymClient, image: str) -> Iterator[str]:
    created = client.create_sandbox({"image": image, "labels": dict(RUN_LABEL)})
    yield created["id"]
    client.delete_sandbox(created["id"])
