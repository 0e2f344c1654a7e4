"""The package and its provider without NeMo Gym: the same interpreter with no installed packages (``-S``)."""

from __future__ import annotations

import subprocess

from conftest import RUN_LABEL, python_command

from gym_sandboxd import GymClient


def test_the_package_imports_and_works_without_nemo_gym(client: GymClient, image: str) -> None:
    script = (
        "import asyncio, sys\n"
        "from gym_sandboxd.nemo_gym_provider import GymSandboxdProvider\n"
        "from gym_sandboxd import _nemo_types as types\n"
        "assert not types.HAS_NEMO_GYM and 'nemo_gym' not in sys.modules\n"
        "async def main():\n"
        "    provider = GymSandboxdProvider()\n"
        f"    handle = await provider.create(types.SandboxSpec(image={image!r}, metadata={RUN_LABEL!r}))\n"
        "    result = await provider.exec(handle, 'exit 7')\n"
        "    await provider.close(handle)\n"
        "    print(type(result).__module__, result.return_code)\n"
        "asyncio.run(main())\n"
    )
    ran = subprocess.run(python_command(script, site=False), capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "gym_sandboxd._nemo_types 7\n"
