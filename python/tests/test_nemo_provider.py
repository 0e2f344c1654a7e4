"""The NeMo Gym provider through NeMo Gym's own registry and facades (the real package) on a real daemon."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib.metadata
import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from conftest import NEMO_GYM_PATH, PACKAGE_ROOT, RUN_LABEL, connected_script, python_command

from gym_sandboxd import GymClient
from gym_sandboxd.errors import UnauthorizedError
from gym_sandboxd.nemo_gym_provider import GymSandboxdProvider
from nemo_gym.sandbox import (
    AsyncSandbox,
    AsyncSandboxCompose,
    create_provider,
    resolve_provider_config,
    resolve_provider_metadata,
    ConnectableProvider,
    Sandbox,
    SandboxCreateError,
    SandboxCreateVerificationError,
    SandboxExecResult,
    SandboxSpec,
    SandboxStatus,
    SupportsSandboxEndpoint,
    SupportsSandboxPty,
    get_provider_class,
    list_providers,
)

CONFIG = {"gym_sandboxd": {}}  # the provider finds the daemon as the CLI does (GYM_STATE_DIR)


def _spec(image: str, **fields) -> SandboxSpec:
    metadata = {**RUN_LABEL, **fields.pop("metadata", {})}
    return SandboxSpec(image=image, metadata=metadata, **fields)


def _mine(client: GymClient, **labels: str) -> list[str]:
    return [item["id"] for item in client.list_sandboxes(labels={**RUN_LABEL, **labels})]


def test_it_is_the_installed_nemo_gym() -> None:
    """The facade under test is NeMo Gym's distribution (the version the runner names), not a copy of ours."""
    import nemo_gym.sandbox

    if NEMO_GYM_PATH is not None:  # a source folder named by the runner
        assert Path(NEMO_GYM_PATH).resolve() in Path(nemo_gym.sandbox.__file__).resolve().parents
        return
    distribution = importlib.metadata.distribution("nemo-gym")
    wanted = os.environ.get("GYM_TEST_NEMO_GYM_VERSION")
    assert wanted is None or distribution.version == wanted
    installed = Path(str(distribution.locate_file("nemo_gym/sandbox/__init__.py"))).resolve()
    assert Path(nemo_gym.sandbox.__file__).resolve() == installed
    assert PACKAGE_ROOT not in installed.parents


def test_nemo_gym_finds_the_provider_by_its_entry_point() -> None:
    assert "gym_sandboxd" in list_providers()
    assert get_provider_class("gym_sandboxd") is GymSandboxdProvider
    provider = GymSandboxdProvider()
    assert isinstance(provider, ConnectableProvider)
    # Declared ports are reached through the daemon; terminals are declared too (test_nemo_pty.py).
    assert isinstance(provider, SupportsSandboxEndpoint) and isinstance(provider, SupportsSandboxPty)


def test_a_named_sandbox_block_selects_the_provider(client: GymClient, image: str) -> None:
    """As a NeMo Gym config selects it: a top-level ``sandbox:`` block (the merged config is
    OmegaConf's) named by ``sandbox_provider``, with NeMo Gym's reserved ``default_metadata``."""
    from omegaconf import OmegaConf

    merged = OmegaConf.create(
        {"sandbox": {"gym_sandboxd": {"max_download_bytes": 4096}, "default_metadata": {"sandbox-api": "gym-sandboxd"}}}
    )
    resolved = resolve_provider_config("sandbox", merged)
    assert resolved == {"gym_sandboxd": {"max_download_bytes": 4096}}
    assert isinstance(create_provider(resolved), GymSandboxdProvider)
    with pytest.raises(TypeError):  # an option the provider does not know is an error, not ignored
        create_provider({"gym_sandboxd": {"max_download_byte": 4096}})

    async def scenario() -> None:
        metadata = resolve_provider_metadata("sandbox", merged) | {"case": "named"}
        async with AsyncSandbox(resolved, _spec(image, metadata=metadata)) as sandbox:
            await sandbox.start()
            assert client.get_sandbox(sandbox._handle.sandbox_id)["labels"]["sandbox-api"] == "gym-sandboxd"
            assert (await sandbox.exec("echo named")).stdout == "named\n"
        assert _mine(client, case="named") == []

    asyncio.run(scenario())


def test_async_facade_creates_runs_times_out_moves_files_and_stops(client: GymClient, image: str, tmp_path: Path) -> None:
    async def scenario() -> None:
        spec = _spec(
            image,
            workdir="/work",
            env={"TASK_ID": "t-7"},
            files={"/work/seed.txt": "seeded\n", "notes/rel.txt": "relative\n"},
            metadata={"Task": "django__django-1234"},
            resources={"cpu": 0.5, "memory_mib": 256},
            ttl_s=600,
            ready_timeout_s=30,
        )
        sandbox = await AsyncSandbox(CONFIG, spec).start()
        sandbox_id = sandbox._handle.sandbox_id
        info = client.get_sandbox(sandbox_id)
        assert info["labels"]["task"] == "django__django-1234" and info["labels"]["nemo-gym.sandbox"] == "1"
        assert (info["spec"]["resources"]["cpus"], info["spec"]["resources"]["memoryMiB"]) == (0.5, 256) and info["spec"]["ttlSeconds"] == 600

        ran = await sandbox.exec("pwd; echo $TASK_ID; cat seed.txt notes/rel.txt; echo oops >&2; exit 5")
        assert isinstance(ran, SandboxExecResult)
        assert (ran.return_code, ran.error_type) == (5, None)
        assert ran.stdout == "/work\nt-7\nseeded\nrelative\n" and ran.stderr == "oops\n"
        assert (await sandbox.exec("echo $X", env={"X": "per-exec"}, cwd="/tmp")).stdout == "per-exec\n"

        started = time.monotonic()
        timed_out = await sandbox.exec("echo before; sleep 30; echo after", timeout_s=0.5)
        assert (timed_out.return_code, timed_out.error_type) == (125, "timeout")
        assert time.monotonic() - started < 10
        assert "after" not in (timed_out.stdout or "")
        left = await sandbox.exec("ps -o comm= | grep -c '^sleep' || true")
        assert left.stdout.strip() == "0", "the timed-out command left a process behind"
        assert (await sandbox.exec("echo still usable")).return_code == 0

        local = tmp_path / "tool.sh"
        local.write_text("#!/bin/sh\necho tool ran\n")
        local.chmod(0o755)
        await sandbox.upload(local, "/opt/bin/tool.sh")
        assert (await sandbox.exec("/opt/bin/tool.sh")).stdout == "tool ran\n"
        await sandbox.download("/opt/bin/tool.sh", tmp_path / "back" / "tool.sh")
        assert (tmp_path / "back" / "tool.sh").read_text() == local.read_text()
        with pytest.raises(RuntimeError):
            await sandbox.download("/no/such/file", tmp_path / "missing")

        assert await sandbox.status() == SandboxStatus.RUNNING
        await sandbox.stop()
        assert await sandbox.status() == SandboxStatus.STOPPED
        assert _mine(client, task="django__django-1234") == []

    asyncio.run(scenario())


def test_a_background_service_outlives_its_command(client: GymClient, image: str) -> None:
    """``exec(preserve_background_services=True)`` (how Terminal-Bench's server runs a solution that
    starts a server): a service that redirects its output keeps running for the next command."""

    async def scenario() -> None:
        async with AsyncSandbox(CONFIG, _spec(image, metadata={"case": "service"})) as sandbox:
            await sandbox.start()
            started = await sandbox.exec(
                "sh -c 'while true; do date > /tmp/beat; sleep 1; done' >/dev/null 2>&1 & echo started",
                preserve_background_services=True,
            )
            assert (started.return_code, started.stdout) == (0, "started\n"), started
            seen = await sandbox.exec("sleep 2; ps -o args")
            assert "sh -c while true" in seen.stdout, seen

    asyncio.run(scenario())
    assert _mine(client, case="service") == []


def test_a_download_is_bounded_by_the_provider_config(client: GymClient, image: str, tmp_path: Path) -> None:
    async def scenario() -> None:
        sandbox = await AsyncSandbox({"gym_sandboxd": {"max_download_bytes": 1024 * 1024}}, _spec(image)).start()
        try:
            # 300 MiB to the sandbox's `ls`, nothing on its disk; every byte on this host's.
            assert (await sandbox.exec("truncate -s 300M /tmp/report.json")).return_code == 0
            with pytest.raises(RuntimeError, match="FILE_TOO_LARGE"):
                await sandbox.download("/tmp/report.json", tmp_path / "report.json")
            assert not (tmp_path / "report.json").exists()
            assert (await sandbox.exec("truncate -s 512K /tmp/report.json")).return_code == 0
            await sandbox.download("/tmp/report.json", tmp_path / "report.json")
            assert (tmp_path / "report.json").stat().st_size == 512 * 1024
        finally:
            await sandbox.stop()

    asyncio.run(scenario())
    with pytest.raises(ValueError):
        GymSandboxdProvider(max_download_bytes=0)


def test_sync_facade(client: GymClient, image: str, tmp_path: Path) -> None:
    with Sandbox(CONFIG, _spec(image, metadata={"case": "sync"})) as sandbox:
        sandbox.start()
        assert sandbox.exec("echo sync").stdout == "sync\n"
        assert sandbox.exec("sleep 10", timeout_s=0.3).error_type == "timeout"
        (tmp_path / "in.txt").write_text("in")
        sandbox.upload(tmp_path / "in.txt", "/tmp/in.txt")
        sandbox.download("/tmp/in.txt", tmp_path / "out.txt")
        assert (tmp_path / "out.txt").read_text() == "in"
        assert sandbox.status() == SandboxStatus.RUNNING
        assert len(_mine(client, case="sync")) == 1
    assert _mine(client, case="sync") == []


def test_create_refuses_what_it_cannot_honour_before_allocating(client: GymClient, image: str) -> None:
    async def refused(spec: SandboxSpec) -> SandboxCreateError:
        with pytest.raises(SandboxCreateError) as caught:
            await GymSandboxdProvider().create(spec)
        return caught.value

    async def scenario() -> None:
        for spec in (
            _spec(image, metadata={"case": "refused"}, provider_options={"volumes": ["/:/host"]}),
            # A pool's sandboxes were made from its own spec: ports and an entrypoint cannot be added.
            _spec(image, metadata={"case": "refused"}, ports=[8080], provider_options={"pool": "any-pool"}),
            _spec(image, metadata={"case": "refused"}, entrypoint=["/bin/server"], provider_options={"pool": "any-pool"}),
            _spec(image, metadata={"case": "refused"}, resources={"gpu_type": "h100"}),
            SandboxSpec(metadata=dict(RUN_LABEL)),
        ):
            await refused(spec)
        missing = await refused(_spec("gym/no-such-image:never", metadata={"case": "refused"}))
        assert "IMAGE_NOT_FOUND" in str(missing)
        never_ready = await refused(
            _spec(image, metadata={"case": "refused"}, ready_timeout_s=1, provider_options={"readiness_command": "false"})
        )
        assert isinstance(never_ready, SandboxCreateVerificationError)

    asyncio.run(scenario())
    assert _mine(client, case="refused") == []


def test_what_the_facade_offers_beyond_the_protocol_is_refused_clearly(client: GymClient, image: str, tmp_path: Path) -> None:
    """Pause/resume, endpoints and Compose are capabilities the provider does not declare:
    NeMo Gym's facade refuses each with its own error, and the sandbox goes on working."""

    async def scenario() -> None:
        async with AsyncSandbox(CONFIG, _spec(image, metadata={"case": "beyond"})) as sandbox:
            await sandbox.start()
            for call in (sandbox.pause, sandbox.resume):
                with pytest.raises(NotImplementedError, match="pause/resume"):
                    await call()
            with pytest.raises(ValueError, match="not declared"):
                await sandbox.endpoint(8080)
            assert (await sandbox.exec("echo still here")).stdout == "still here\n"
        # NeMo Gym's Compose adapter needs networking between sandboxes, which the provider does not
        # declare: refused before any service starts.
        compose = tmp_path / "compose.yaml"
        compose.write_text(f"services:\n  app:\n    image: {image}\n  db:\n    image: {image}\n")
        with pytest.raises(NotImplementedError, match="networking between sandboxes"):
            await AsyncSandboxCompose(CONFIG, compose).start()
        # NeMo Gym's shipped sandbox configs carry options for their own providers (Terminal-Bench's
        # OpenSandbox `resource_requests`): refused by name before anything is made, not dropped.
        with pytest.raises(SandboxCreateError, match="resource_requests"):
            await AsyncSandbox(CONFIG, _spec(image, metadata={"case": "beyond"}, provider_options={"resource_requests": {"cpu": 0.5}})).start()
        # Its disk request (30 GiB) on a backend without disk quotas (the test daemon's Docker): the
        # daemon's refusal, as NeMo Gym's SandboxCreateError.
        with pytest.raises(SandboxCreateError, match="CAPABILITY_UNSUPPORTED"):
            await AsyncSandbox(CONFIG, _spec(image, metadata={"case": "beyond"}, resources={"disk_gib": 30})).start()
        assert _mine(client, case="beyond") == []

    asyncio.run(scenario())


def test_a_server_in_the_sandbox_is_fetched_through_endpoint_and_only_with_its_key(client: GymClient, image: str) -> None:
    """Through NeMo Gym's facade: the spec's entrypoint starts a web server in a sandbox without
    network, ``endpoint(port)`` gives the URL and header the caller fetches it with; without the
    header, or with another sandbox's, the daemon refuses; an undeclared port is refused."""
    import urllib.error
    import urllib.request

    server = "mkdir -p /www && echo served from the sandbox > /www/index.html && exec httpd -f -p 8080 -h /www"

    def fetch(url: str, headers: dict[str, str]) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    async def scenario() -> None:
        spec = _spec(image, metadata={"case": "endpoint"}, ports=[8080], entrypoint=["sh", "-c", server])
        async with AsyncSandbox(CONFIG, spec) as sandbox, AsyncSandbox(CONFIG, spec) as other:
            await sandbox.start()
            await other.start()
            endpoint = await sandbox.endpoint(8080)
            assert endpoint.endpoint.endswith("/ports/8080/") and "x-gym-port-key" in endpoint.headers
            # NeMo Gym's spec has no health check: the entrypoint may still be starting its server.
            for _ in range(100):
                status, body = await asyncio.to_thread(fetch, endpoint.endpoint + "index.html", endpoint.headers)
                if status == 200:
                    break
                await asyncio.sleep(0.1)
            assert (status, body) == (200, "served from the sandbox\n")
            assert (await asyncio.to_thread(fetch, endpoint.endpoint + "index.html", {}))[0] == 401
            others = await other.endpoint(8080)
            assert (await asyncio.to_thread(fetch, endpoint.endpoint + "index.html", others.headers))[0] == 401
            with pytest.raises(ValueError, match="not declared"):
                await sandbox.endpoint(9090)
            # The entrypoint is the daemon's supervised service, beside the keeper.
            services = [client.get_sandbox(made)["service"] for made in _mine(client, case="endpoint")]
            assert [(service["state"], service["argv"]) for service in services] == [("running", ["sh", "-c", server])] * 2
        assert _mine(client, case="endpoint") == []

    asyncio.run(scenario())


def test_a_dead_sandbox_is_error_type_sandbox(client: GymClient, image: str) -> None:
    async def scenario() -> None:
        provider = GymSandboxdProvider()
        behind_its_back = await provider.create(_spec(image, metadata={"case": "dead"}))
        destroyed = await provider.create(_spec(image, metadata={"case": "dead"}))
        # One killed behind the daemon's back, in the engine; one destroyed through the daemon.
        subprocess.run(
            ["docker", "rm", "-f", *subprocess.run(
                ["docker", "ps", "-aq", "--filter", f"label=gym.sandbox-id={behind_its_back.sandbox_id}"],
                check=True, capture_output=True, text=True,
            ).stdout.split()],
            check=True, capture_output=True,
        )  # fmt: skip
        client.delete_sandbox(destroyed.sandbox_id)
        for handle in (behind_its_back, destroyed):
            result = await provider.exec(handle, "echo hi")
            assert (result.return_code, result.error_type) == (125, "sandbox"), result
            assert await provider.status(handle) in (SandboxStatus.STOPPED, SandboxStatus.ERROR, SandboxStatus.UNKNOWN)
            await provider.close(handle)  # already gone: not an error
        await provider.aclose()

    asyncio.run(scenario())


def test_a_handle_moves_to_another_process(client: GymClient, image: str) -> None:
    async def scenario() -> dict:
        sandbox = await AsyncSandbox(CONFIG, _spec(image, workdir="/srv", metadata={"case": "moved"})).start()
        await sandbox.exec("echo from-the-first > /srv/state")
        return await sandbox.serialize()

    descriptor = asyncio.run(scenario())
    assert client.address.token not in json.dumps(descriptor)
    other = connected_script(
        "    print((await sandbox.exec('cat state; pwd')).stdout, end='')\n"
        "    await sandbox.stop()\n"
    )
    moved = subprocess.run([*python_command(other), json.dumps(descriptor)], capture_output=True, text=True, timeout=60)
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout == "from-the-first\n/srv\n"
    assert _mine(client, case="moved") == []  # the other process's stop destroyed it


def test_an_operate_descriptor_lends_the_sandbox_not_the_daemon(client: GymClient, image: str, tmp_path: Path) -> None:
    """NeMo Gym's ``serialize(scope="operate")``: another process operates the sandbox with a scoped
    credential and no token file, can do nothing else, and its stop lets go without destroying."""

    async def scenario() -> dict:
        sandbox = await AsyncSandbox(CONFIG, _spec(image, workdir="/srv", metadata={"case": "lent"})).start()
        await sandbox.exec("echo lent > /srv/state")
        return await sandbox.serialize(scope="operate")

    descriptor = asyncio.run(scenario())
    [lent] = _mine(client, case="lent")
    other = client.create_sandbox({"image": image, "labels": dict(RUN_LABEL)})["id"]
    credential = descriptor["access"]["token"]
    assert credential.startswith("gym-access.") and client.address.token not in json.dumps(descriptor)
    # Nothing of it reaches the sandbox's record (its env, labels, spec).
    assert credential.split(".")[2] not in json.dumps(client.get_sandbox(lent))
    # The borrower finds the daemon (daemon.json) but has no token file to read.
    borrower_state = tmp_path / "borrower-state"
    borrower_state.mkdir()
    (borrower_state / "daemon.json").write_bytes((Path(os.environ["GYM_STATE_DIR"]) / "daemon.json").read_bytes())
    borrower = (
        "import asyncio, json, sys, pathlib, tempfile\n"
        "from nemo_gym.sandbox import AsyncSandbox\n"
        "from gym_sandboxd.nemo_gym_provider import GymSandboxdProvider\n"
        "from gym_sandboxd.errors import AccessDeniedError\n"
        "async def refused(call):\n"
        "    try:\n"
        "        await call\n"
        "    except AccessDeniedError:\n"
        "        return 'denied'\n"
        "    return 'allowed'\n"
        "async def main():\n"
        "    descriptor, other = json.loads(sys.argv[1]), sys.argv[2]\n"
        "    sandbox = await AsyncSandbox.connect(descriptor, provider=GymSandboxdProvider())\n"
        "    print((await sandbox.exec('cat state; pwd')).stdout, end='')\n"
        "    local = pathlib.Path(tempfile.mkdtemp()) / 'up.txt'\n"
        "    local.write_text('uploaded')\n"
        "    await sandbox.upload(local, '/srv/up.txt')\n"
        "    await sandbox.download('/srv/up.txt', local.with_name('down.txt'))\n"
        "    print(local.with_name('down.txt').read_text())\n"
        "    own = sandbox._handle.raw.client\n"
        "    lent = descriptor['sandbox_id']\n"
        "    print(await refused(own.delete_sandbox(lent)), await refused(own.keepalive(lent)),\n"
        "          await refused(own.exec(other, ['true'])), await refused(own.get_sandbox(other)),\n"
        "          await refused(own.create_sandbox({'image': 'x'})), await refused(own.list_sandboxes()),\n"
        "          await refused(own.grant_access([lent], ['exec'])), await refused(own.fork(lent, count=1)))\n"
        "    await sandbox.stop()\n"
        "asyncio.run(main())\n"
    )
    environment = {**os.environ, "GYM_STATE_DIR": str(borrower_state)}
    moved = subprocess.run(
        [*python_command(borrower), json.dumps(descriptor), other], capture_output=True, text=True, env=environment, timeout=60
    )
    assert moved.returncode == 0, moved.stderr
    assert moved.stdout.splitlines() == ["lent", "/srv", "uploaded", " ".join(["denied"] * 8)]
    # The borrower's stop revoked its credential and left the sandbox to its owner.
    assert _mine(client, case="lent") == [lent]
    assert descriptor["access"]["grant_id"] not in [grant["id"] for grant in client.list_access()]
    with GymClient(address=dataclasses.replace(client.address, token=credential)) as revoked:
        with pytest.raises(UnauthorizedError):
            revoked.get_sandbox(lent)
    client.delete_sandbox(lent)
    client.delete_sandbox(other)


def test_a_borrower_that_disconnects_gives_its_credential_back(client: GymClient, image: str) -> None:
    """NeMo Gym's borrowers (its Hermes agent, say) let go with ``AsyncSandbox.disconnect()``, which
    reaches the provider only as ``aclose()``: the credential is revoked there, the sandbox kept."""

    async def scenario() -> dict:
        sandbox = await AsyncSandbox(CONFIG, _spec(image, metadata={"case": "disconnected"})).start()
        return await sandbox.serialize(scope="operate")

    descriptor = asyncio.run(scenario())
    borrower = connected_script(
        "    print((await sandbox.exec('echo borrowed')).stdout, end='')\n"
        "    await sandbox.disconnect()\n"
    )
    ran = subprocess.run([*python_command(borrower), json.dumps(descriptor)], capture_output=True, text=True, timeout=60)
    assert (ran.returncode, ran.stdout) == (0, "borrowed\n"), ran.stderr
    assert descriptor["access"]["grant_id"] not in [grant["id"] for grant in client.list_access()]
    [kept] = _mine(client, case="disconnected")
    client.delete_sandbox(kept)


def test_an_operate_credential_dies_with_its_sandbox(client: GymClient, image: str) -> None:
    async def scenario() -> dict:
        sandbox = await AsyncSandbox(CONFIG, _spec(image, metadata={"case": "dies"})).start()
        descriptor = await sandbox.serialize(scope="operate")
        with pytest.raises(ValueError):
            await sandbox.serialize(scope="owner")
        await sandbox.stop()
        return descriptor

    descriptor = asyncio.run(scenario())
    with pytest.raises(RuntimeError, match="scoped credential"):
        asyncio.run(GymSandboxdProvider().connect(descriptor))


def test_training_burst_from_a_warm_pool(client: GymClient, image: str, run_id: str) -> None:
    name = f"nemo-{run_id}"
    client.define_pool(name, {"spec": {"image": image}, "minIdle": 4, "maxTotal": 8})
    try:
        deadline = time.monotonic() + 60
        while client.get_pool(name)["idle"] < 4:
            assert time.monotonic() < deadline, client.get_pool(name)["lastError"]
            time.sleep(0.2)

        async def scenario() -> None:
            provider = GymSandboxdProvider(pool=name)
            sandboxes = [AsyncSandbox(provider, _spec(None, env={"ROLLOUT": str(index)}, metadata={"case": "burst"})) for index in range(4)]
            started = time.monotonic()
            await asyncio.gather(*(sandbox.start() for sandbox in sandboxes))
            elapsed = time.monotonic() - started
            results = await asyncio.gather(*(sandbox.exec("echo $ROLLOUT") for sandbox in sandboxes))
            assert sorted(result.stdout for result in results) == [f"{index}\n" for index in range(4)]
            assert all(client.get_sandbox(sandbox._handle.sandbox_id)["fromPool"] for sandbox in sandboxes), elapsed
            await asyncio.gather(*(sandbox.stop() for sandbox in sandboxes))

        asyncio.run(scenario())
        with pytest.raises(SandboxCreateError):
            asyncio.run(GymSandboxdProvider(pool=name).create(_spec("gym/other:image")))
    finally:
        client.delete_pool(name)
    assert _mine(client, case="burst") == []


def test_model_endpoint_reaches_the_gateway_from_inside(client: GymClient, image: str) -> None:
    async def scenario() -> None:
        provider = GymSandboxdProvider()
        handle = await provider.create(_spec(image, metadata={"case": "gateway"}))
        try:
            endpoint = await provider.model_endpoint(handle, upstream={"baseUrl": "http://127.0.0.1:9/v1", "model": "policy"})
            assert endpoint.endpoint.startswith("http://127.0.0.1:") and endpoint.endpoint.endswith("/v1")
            key = endpoint.headers["Authorization"]
            models = await provider.exec(handle, f"wget -q -O - --header 'Authorization: {key}' {endpoint.endpoint}/models")
            assert models.return_code == 0, models
            assert "policy" in models.stdout
            denied = await provider.exec(handle, f"wget -q -O - --header 'Authorization: Bearer wrong' {endpoint.endpoint}/models")
            assert denied.return_code != 0
            await provider.client.close_rollout(endpoint.headers["X-Gym-Rollout-Id"])
        finally:
            await provider.close(handle)

    asyncio.run(scenario())
