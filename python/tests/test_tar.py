"""Unpacking an archive a sandbox made: the attacks an agent (or a sandbox's own ``tar``) can make.

No daemon: each archive is built here, entry by entry, as a hostile ``tar`` would write it, and
unpacked with the function both clients' ``download_directory`` use. Each case checks what the
attacker wants, a file or a link outside the folder, and not only the error.
"""

from __future__ import annotations

import io
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from gym_sandboxd import errors as gym_errors
from gym_sandboxd._tar import DEFAULT_MAX_DOWNLOAD_BYTES, extract_stream

Entry = tuple[str, str, str | bytes]  # (kind, name, link target or content)


def archive(*entries: Entry, pax: dict[str, str] | None = None) -> io.BytesIO:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for kind, name, value in entries:
            info = tarfile.TarInfo(name)
            if pax is not None:
                info.pax_headers = dict(pax)
            if kind == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            elif kind == "symlink":
                info.type, info.linkname = tarfile.SYMTYPE, str(value)
                tar.addfile(info)
            elif kind == "hardlink":
                info.type, info.linkname = tarfile.LNKTYPE, str(value)
                tar.addfile(info)
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
                tar.addfile(info)
            else:
                content = value if isinstance(value, bytes) else value.encode()
                info.size, info.mode = len(content), 0o644
                tar.addfile(info, io.BytesIO(content))
    data.seek(0)
    return data


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, Path]:
    """The download's folder, deep enough for `..` chains, and a sibling the attacks aim at."""
    target = tmp_path / "home" / "user" / "results"
    outside = tmp_path / "home" / "user" / "outside"
    outside.mkdir(parents=True)
    return target, outside


def everything_under(root: Path) -> set[str]:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


def assert_nothing_escaped(tmp_path: Path, target: Path, outside: Path) -> None:
    assert list(outside.iterdir()) == []
    # Nothing anywhere but in the target folder and the sibling.
    stray = [p for p in tmp_path.rglob("*") if target not in [p, *p.parents] and outside not in [p, *p.parents]]
    assert {str(p.relative_to(tmp_path)) for p in stray} <= {"home", "home/user"}
    # No link in the folder that leads out of it.
    if target.exists():
        for path in target.rglob("*"):
            if path.is_symlink():
                resolved = Path(os.path.realpath(path, strict=False))
                assert target.resolve() in [resolved, *resolved.parents], f"{path} -> {os.readlink(path)} leaves"


def path_max_chain(escape_to: str) -> list[Entry]:
    """Links whose resolution passes PATH_MAX, then a link through them and a file through that.

    ``Path.resolve()`` (and the data filter's ``realpath``) stop resolving once the path is longer
    than PATH_MAX and judge the rest as text, so `escape` looks as if it stayed inside, while the
    kernel follows every link (the technique of CVE-2025-4517).
    """
    long_name = "d" * 247
    steps = "abcdefghijklmnop"
    entries: list[Entry] = []
    path = ""
    for step in steps:
        entries.append(("dir", f"{path}{long_name}", ""))
        entries.append(("symlink", f"{path}{step}", long_name))
        path = f"{path}{long_name}/"
    deep = "/".join(steps) + "/" + "l" * 254
    entries.append(("symlink", deep, "../" * len(steps)))
    # From the folder, up past it: `deep` resolves back to the folder, so `..`s climb out of it.
    entries.append(("symlink", "escape", f"{deep}/{escape_to}"))
    entries.append(("file", "escape/authorized_keys", "ssh-ed25519 AAAA attacker\n"))
    return entries


ATTACKS: dict[str, Callable[[Path, Path], list[Entry]]] = {
    "absolute name": lambda target, outside: [("file", f"{outside}/planted", "x")],
    "dot-dot name": lambda target, outside: [("file", "../outside/planted", "x")],
    "dot-dot deep in the name": lambda target, outside: [("dir", "a", ""), ("file", "a/./../../outside/planted", "x")],
    "link to an absolute path, then a file through it": lambda target, outside: [
        ("symlink", "keys", str(outside)),
        ("file", "keys/planted", "x"),
    ],
    "link to an absolute path alone": lambda target, outside: [("symlink", "keys", str(outside))],
    "link climbing out": lambda target, outside: [("symlink", "up", "../outside")],
    "link to dot, then a dot-dot link through it": lambda target, outside: [
        ("symlink", "here", "."),
        ("symlink", "here/up", "../outside"),
    ],
    "file through a link made earlier": lambda target, outside: [
        ("symlink", "up", "../outside"),
        ("file", "up/planted", "x"),
    ],
    "a chain of links each inside on its own": lambda target, outside: [
        ("dir", "p/q", ""),
        ("symlink", "p/q/top", "../.."),
        ("symlink", "out", "p/q/top/../outside"),
    ],
    "a link re-pointed by a later one": lambda target, outside: [
        ("dir", "x", ""),
        ("symlink", "a", "y/../../outside"),
        ("dir", "y", ""),
        ("symlink", "y", "x/.."),
    ],
    "a later link under an earlier one": lambda target, outside: [
        ("symlink", "a", "b"),
        ("symlink", "a/c", "../../outside"),
    ],
    "hard link to a file outside": lambda target, outside: [("hardlink", "stolen", "../outside/secret")],
    "hard link to an absolute path": lambda target, outside: [("hardlink", "stolen", f"{outside}/secret")],
    "hard link through a link": lambda target, outside: [
        ("symlink", "up", "../outside"),
        ("hardlink", "stolen", "up/secret"),
    ],
    "a pipe": lambda target, outside: [("fifo", "pipe", "")],
    "PATH_MAX link chain (CVE-2025-4517 technique), relative": lambda target, outside: path_max_chain("../outside"),
    "PATH_MAX link chain, deeper climb": lambda target, outside: path_max_chain("../../../../../../../" + str(outside)),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_an_archive_never_writes_or_links_outside_its_folder(tmp_path: Path, places: tuple[Path, Path], attack: str) -> None:
    target, outside = places
    (outside / "secret").write_text("host secret\n")
    before = (outside / "secret").stat()
    with pytest.raises(gym_errors.ArchiveUnsafeError):
        extract_stream(archive(*ATTACKS[attack](target, outside)), target)
    (outside / "secret").unlink()
    assert before.st_nlink == 1
    assert_nothing_escaped(tmp_path, target, outside)


def test_a_link_left_in_the_folder_by_an_earlier_download_is_not_written_through(
    tmp_path: Path, places: tuple[Path, Path]
) -> None:
    target, outside = places
    target.mkdir(parents=True)
    # An earlier download (or the user) left a link here; the next archive has a real directory of that name.
    (target / "keys").symlink_to(outside)
    with pytest.raises(gym_errors.ArchiveUnsafeError):
        extract_stream(archive(("dir", "keys", ""), ("file", "keys/planted", "x")), target)
    with pytest.raises(gym_errors.ArchiveUnsafeError):
        extract_stream(archive(("file", "keys/planted", "x")), target)
    (target / "keys").unlink()
    # A link of the folder a new link would climb through.
    (target / "p").mkdir()
    (target / "p" / "top").symlink_to("..")
    with pytest.raises(gym_errors.ArchiveUnsafeError):
        extract_stream(archive(("symlink", "out", "p/top/../outside")), target)
    (target / "p" / "top").unlink()
    assert_nothing_escaped(tmp_path, target, outside)


def test_a_file_replacing_a_link_replaces_the_link_not_its_target(tmp_path: Path, places: tuple[Path, Path]) -> None:
    target, outside = places
    target.mkdir(parents=True)
    (outside / "secret").write_text("host secret\n")
    (target / "report.json").symlink_to(outside / "secret")
    extract_stream(archive(("file", "report.json", "{}")), target)
    assert (outside / "secret").read_text() == "host secret\n"
    assert not (target / "report.json").is_symlink() and (target / "report.json").read_text() == "{}"


def test_an_ordinary_tree_with_links_inside_it_unpacks_whole(tmp_path: Path) -> None:
    target = tmp_path / "back"
    extract_stream(
        archive(
            ("dir", "src", ""),
            ("file", "src/main.py", "print('hi')\n"),
            ("dir", "node_modules/.bin", ""),
            ("dir", "node_modules/tool/bin", ""),
            ("file", "node_modules/tool/bin/run.js", "run\n"),
            ("symlink", "node_modules/.bin/run", "../tool/bin/run.js"),
            ("symlink", "latest", "src"),
            ("symlink", "dangling", "not-yet/there"),
            ("hardlink", "src/same.py", "src/main.py"),
            ("file", "./dotted/plain", "x"),
        ),
        target,
    )
    assert (target / "node_modules" / ".bin" / "run").read_text() == "run\n"
    assert os.readlink(target / "latest") == "src" and (target / "latest" / "main.py").read_text() == "print('hi')\n"
    assert os.readlink(target / "dangling") == "not-yet/there"
    assert (target / "src" / "same.py").stat().st_ino == (target / "src" / "main.py").stat().st_ino
    assert (target / "dotted" / "plain").read_text() == "x"


def test_modes_come_without_setuid_and_directories_get_theirs_last(tmp_path: Path) -> None:
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        folder = tarfile.TarInfo("locked")
        folder.type, folder.mode = tarfile.DIRTYPE, 0o555
        tar.addfile(folder)
        tool = tarfile.TarInfo("locked/tool")
        tool.size, tool.mode = 2, 0o4755
        tar.addfile(tool, io.BytesIO(b"#!"))
    data.seek(0)
    extract_stream(data, tmp_path / "out")
    assert (tmp_path / "out" / "locked" / "tool").stat().st_mode & 0o7777 == 0o755
    assert (tmp_path / "out" / "locked").stat().st_mode & 0o777 == 0o555
    (tmp_path / "out" / "locked").chmod(0o755)


def test_the_files_of_an_archive_are_bounded_in_all(tmp_path: Path) -> None:
    with pytest.raises(gym_errors.FileTooLargeError) as refused:
        extract_stream(archive(("file", "big", b"x" * 4096)), tmp_path / "one", max_bytes=1000)
    assert refused.value.details["maxBytes"] == 1000
    assert not (tmp_path / "one" / "big").exists()  # refused from its header, before a byte
    many = [("file", f"part-{index}", b"y" * 300) for index in range(10)]
    with pytest.raises(gym_errors.FileTooLargeError):
        extract_stream(archive(*many), tmp_path / "many", max_bytes=1000)
    written = sum(path.stat().st_size for path in (tmp_path / "many").iterdir())
    assert written <= 1000
    extract_stream(archive(*many), tmp_path / "raised", max_bytes=3000)
    assert len(list((tmp_path / "raised").iterdir())) == 10
    assert DEFAULT_MAX_DOWNLOAD_BYTES == 1024 * 1024 * 1024


def test_a_pax_path_record_is_judged_as_the_name(tmp_path: Path, places: tuple[Path, Path]) -> None:
    target, outside = places
    with pytest.raises(gym_errors.ArchiveUnsafeError):
        extract_stream(archive(("file", "harmless", "x"), pax={"path": f"{outside}/planted"}), target)
    with pytest.raises(gym_errors.ArchiveUnsafeError):
        extract_stream(archive(("symlink", "harmless", "ok"), pax={"linkpath": str(outside)}), target)
    assert_nothing_escaped(tmp_path, target, outside)
