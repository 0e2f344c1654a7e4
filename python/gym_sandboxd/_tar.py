"""Directories as tar streams, made and unpacked piece by piece (never whole in memory)."""

from __future__ import annotations

import os
import tarfile
import threading
from pathlib import Path
from typing import BinaryIO

from .errors import ArchiveUnsafeError


class TarPipe:
    """A tar of a local directory's contents, written by a thread into a pipe as it is read."""

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        root = Path(directory)
        if not root.is_dir():
            raise NotADirectoryError(f"{root} is not a directory")
        read_fd, write_fd = os.pipe()
        self.reader: BinaryIO = os.fdopen(read_fd, "rb")
        self._writer = os.fdopen(write_fd, "wb")
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._write, args=(root,), name="gym-tar-writer", daemon=True)
        self._thread.start()

    def _write(self, root: Path) -> None:
        try:
            with self._writer, tarfile.open(fileobj=self._writer, mode="w|", format=tarfile.PAX_FORMAT) as archive:
                for child in sorted(root.iterdir()):
                    archive.add(child, arcname=child.name)
        except BrokenPipeError:
            pass  # the upload stopped reading (it failed); its error is the one to report
        except BaseException as error:  # noqa: BLE001 - handed to the reading side
            self.error = error

    def finish(self) -> None:
        """Waits for the writer; raises what it failed with (an unreadable file, ...)."""
        self.reader.close()
        self._thread.join()
        if self.error is not None:
            raise self.error


def _check_member(member: tarfile.TarInfo, root: Path) -> None:
    target = (root / member.name).resolve()
    if member.name.startswith("/") or not (target == root or root in target.parents):
        raise ArchiveUnsafeError(f"archive entry {member.name!r} would land outside {root}")
    if member.issym() or member.islnk():
        link_base = target.parent if member.issym() else root
        linked = (link_base / member.linkname).resolve()
        if member.linkname.startswith("/") or not (linked == root or root in linked.parents):
            raise ArchiveUnsafeError(f"archive link {member.name!r} -> {member.linkname!r} points outside {root}")
    if member.isdev():
        raise ArchiveUnsafeError(f"archive entry {member.name!r} is a device, which is not unpacked")


def extract_stream(stream: BinaryIO, directory: str | os.PathLike[str]) -> None:
    """Unpacks a tar stream into a local directory, refusing entries that would leave it."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    root = root.resolve()
    with tarfile.open(fileobj=stream, mode="r|") as archive:
        for member in archive:
            _check_member(member, root)
            member.mode &= 0o7777 & ~0o6000  # no setuid/setgid bits from a sandbox
            if hasattr(tarfile, "data_filter"):
                archive.extract(member, root, filter="data")
            else:
                archive.extract(member, root)
