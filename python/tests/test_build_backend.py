"""The package's own build backend (build_backend/gym_sandboxd_build.py) on copies of the project.

What frontends do with it (pip, uv, from clean environments, offline) is tested by
``test/python-install.int.test.ts``; here, what it writes: a wheel whose RECORD is true, the
metadata pyproject.toml declares and nothing it does not know, the same bytes on every build,
and no file from outside the package folder.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import shutil
import sys
import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

PACKAGE_ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location(
    "gym_sandboxd_build", PACKAGE_ROOT / "build_backend" / "gym_sandboxd_build.py"
)
assert _spec is not None and _spec.loader is not None
backend = importlib.util.module_from_spec(_spec)
sys.modules["gym_sandboxd_build"] = backend
_spec.loader.exec_module(backend)


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the project (what an sdist holds), the current folder as a frontend makes it."""
    root = tmp_path / "project"
    root.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(PACKAGE_ROOT / name, root / name)
    for folder in ("gym_sandboxd", "build_backend"):
        shutil.copytree(PACKAGE_ROOT / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(root)
    return root


def _wheel(root: Path, out: str = "out") -> Path:
    (root / out).mkdir()
    return root / out / backend.build_wheel(str(root / out))


def _metadata(wheel: Path) -> tuple[list[str], dict[str, list[str]]]:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        [metadata_name] = [name for name in names if name.endswith(".dist-info/METADATA")]
        message = Parser().parsestr(archive.read(metadata_name).decode("utf-8"))
    fields: dict[str, list[str]] = {}
    for key, value in message.items():
        fields.setdefault(key, []).append(value)
    return names, fields


def test_the_wheel_holds_the_package_and_a_true_record(project: Path) -> None:
    wheel = _wheel(project)
    assert wheel.name == "gym_sandboxd-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        record = archive.read("gym_sandboxd-0.1.0.dist-info/RECORD").decode("utf-8").splitlines()
        rows = {row.rsplit(",", 2)[0]: row.rsplit(",", 2)[1:] for row in record}
        assert set(rows) == set(names)
        for name in names:
            if name.endswith("/RECORD"):
                assert rows[name] == ["", ""]
                continue
            data = archive.read(name)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert rows[name] == [f"sha256={digest}", str(len(data))]
        entry_points = archive.read("gym_sandboxd-0.1.0.dist-info/entry_points.txt").decode()
    folder = project / "gym_sandboxd"
    sources = sorted(path.relative_to(project).as_posix() for path in folder.rglob("*") if path.is_file())
    assert sorted(name for name in names if not name.startswith("gym_sandboxd-0.1.0.dist-info/")) == sources
    assert "gym_sandboxd/py.typed" in names
    assert "[nemo_gym.sandbox_providers]\ngym_sandboxd = gym_sandboxd.nemo_gym_provider:GymSandboxdProvider" in entry_points


def test_the_metadata_names_the_extras_and_no_requirement_outside_them(project: Path) -> None:
    _, fields = _metadata(_wheel(project))
    assert fields["Name"] == ["gym-sandboxd"]
    assert fields["Requires-Python"] == [">=3.11"]
    assert fields["Provides-Extra"] == ["harbor", "nemo-gym", "mini-swe-agent", "swe-rex"]
    for extra in fields["Provides-Extra"]:
        assert any(requirement.endswith(f'; extra == "{extra}"') for requirement in fields["Requires-Dist"])
    assert all("extra ==" in requirement for requirement in fields["Requires-Dist"])


def test_a_marker_of_an_extra_requirement_is_kept_beside_the_extra(project: Path) -> None:
    pyproject = project / "pyproject.toml"
    header = "[project.optional-dependencies]\n"
    assert header in pyproject.read_text()
    marked = header + "demo = [\"demo>=1; python_version >= '3.12'\"]\n"
    pyproject.write_text(pyproject.read_text().replace(header, marked))
    _, fields = _metadata(_wheel(project))
    assert "demo>=1; (python_version >= '3.12') and extra == \"demo\"" in fields["Requires-Dist"]


def test_every_build_gives_the_same_bytes_and_the_sdist_rebuilds_the_same_wheel(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = _wheel(project, "one"), _wheel(project, "two")
    assert first.read_bytes() == second.read_bytes()
    sdist_name = backend.build_sdist(str(project / "one"))
    (project / "three").mkdir()
    assert backend.build_sdist(str(project / "three")) == sdist_name
    assert (project / "one" / sdist_name).read_bytes() == (project / "three" / sdist_name).read_bytes()

    unpacked = tmp_path / "unpacked"
    with tarfile.open(project / "one" / sdist_name) as archive:
        # Regular files under one folder, written by hand: Debian's 3.11 has no extraction filters.
        for member in archive.getmembers():
            assert member.isfile() and member.name.startswith("gym_sandboxd-0.1.0/") and ".." not in member.name
            target = unpacked / member.name
            target.parent.mkdir(parents=True, exist_ok=True)
            source = archive.extractfile(member)
            assert source is not None
            target.write_bytes(source.read())
    monkeypatch.chdir(unpacked / "gym_sandboxd-0.1.0")
    from_sdist = _wheel(unpacked / "gym_sandboxd-0.1.0")
    assert from_sdist.read_bytes() == first.read_bytes()


def test_an_unknown_project_key_is_refused_not_left_out(project: Path) -> None:
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('version = "0.1.0"', 'version = "0.1.0"\ngui-scripts = {}'))
    (project / "out").mkdir()
    with pytest.raises(backend.BuildError, match="gui-scripts"):
        backend.build_wheel(str(project / "out"))


def test_a_link_in_the_package_is_refused_so_no_outside_file_is_packed(project: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("not the package's\n")
    (project / "gym_sandboxd" / "data.txt").symlink_to(secret)
    (project / "out").mkdir()
    with pytest.raises(backend.BuildError, match="symbolic link"):
        backend.build_wheel(str(project / "out"))
    with pytest.raises(backend.BuildError, match="symbolic link"):
        backend.build_sdist(str(project / "out"))
    assert list((project / "out").iterdir()) == []


def test_the_editable_wheel_points_at_the_source_folder(project: Path) -> None:
    (project / "out").mkdir()
    editable = project / "out" / backend.build_editable(str(project / "out"))
    with zipfile.ZipFile(editable) as archive:
        [pth] = [name for name in archive.namelist() if name.endswith(".pth")]
        assert archive.read(pth).decode() == f"{project.resolve()}\n"
        assert not any(name.startswith("gym_sandboxd/") for name in archive.namelist())
