"""Directories as tar streams, made and unpacked piece by piece (never whole in memory)."""

from __future__ import annotations

import errno
import os
import stat
import tarfile
import threading
from pathlib import Path
from typing import BinaryIO

from .errors import ArchiveUnsafeError, FileTooLargeError


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


# Downloads.

DEFAULT_MAX_DOWNLOAD_BYTES = 1024 * 1024 * 1024
"""1 GiB: what a download writes on this host at most, unless the caller passes ``max_bytes``.

A sandbox's file is sized by its agent: a sparse file costs it nothing inside and its full
apparent size here (a 1 TiB ``truncate`` fills the host's disk), so every download is bounded.
Far above any result, log or patch a run reads back; a checkpoint larger than that is asked for
with a larger ``max_bytes``.
"""

_MAX_LINK_HOPS = 40  # the kernel's own limit on symbolic links followed in one lookup (ELOOP)
_CHUNK_BYTES = 1024 * 1024
_OPEN_DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _too_large(max_bytes: int, what: str) -> FileTooLargeError:
    return FileTooLargeError(
        f"{what} is larger than the download bound of {max_bytes} bytes; pass a larger max_bytes to read it",
        details={"maxBytes": max_bytes},
    )


def download_too_large(sandbox_id: str, path: str, max_bytes: int) -> FileTooLargeError:
    """The error of a download past its bound (what was written of it is removed by the caller)."""
    error = _too_large(max_bytes, f"{path} in sandbox {sandbox_id}")
    error.details.update({"sandboxId": sandbox_id, "path": path})
    return error


def _entry_parts(name: str, what: str) -> tuple[str, ...]:
    """A member name (or hard link target) as path segments, judged on its text alone."""
    if name.startswith("/"):
        raise ArchiveUnsafeError(f"archive {what} {name!r} has an absolute name")
    parts = tuple(part for part in name.split("/") if part not in ("", "."))
    if ".." in parts:
        raise ArchiveUnsafeError(f"archive {what} {name!r} climbs out with '..'")
    if "\0" in name:
        raise ArchiveUnsafeError(f"archive {what} {name!r} holds a NUL byte")
    return parts


class _Extraction:
    """One archive unpacked under one directory, with no path the kernel resolves on its own.

    ``Path.resolve()`` and tarfile's filters judge a path by resolving it, and give up on a
    resolution longer than PATH_MAX by judging the rest of it as text, while the kernel follows
    it (the technique of CVE-2025-4517). Nothing here resolves a path: names are judged as text,
    every directory is opened one segment at a time with ``O_NOFOLLOW`` from the one above it
    (so no entry is written through a link, the archive's or one already in the folder), files are
    created with ``O_NOFOLLOW | O_EXCL``, and symbolic links are made last, each once every link of
    the archive is known, after following it segment by segment through those links and the
    folder's own, refusing one that leaves the folder.
    """

    def __init__(self, directory: str | os.PathLike[str], max_bytes: int) -> None:
        root = Path(directory)
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))
        self.max_bytes = max_bytes
        self.written = 0
        self.files: set[tuple[str, ...]] = set()
        self.links: dict[tuple[str, ...], str] = {}
        self.directory_modes: dict[tuple[str, ...], int] = {}
        # What the archive makes a file or a link, and every directory it puts an entry under.
        self.non_directories: set[tuple[str, ...]] = set()
        self.parents: set[tuple[str, ...]] = set()

    def close(self) -> None:
        os.close(self.root_fd)

    def _shown(self, parts: tuple[str, ...]) -> str:
        return "/".join(parts) or "."

    def _open_directory(self, parts: tuple[str, ...], *, create: bool) -> int:
        """An open descriptor of the folder's directory ``parts``, never through a link."""
        fd = os.dup(self.root_fd)
        try:
            for depth, part in enumerate(parts):
                if create:
                    try:
                        os.mkdir(part, 0o700, dir_fd=fd)
                    except FileExistsError:
                        pass
                try:
                    child = os.open(part, _OPEN_DIRECTORY, dir_fd=fd)
                except OSError as error:
                    if error.errno in (errno.ELOOP, errno.ENOTDIR, errno.EMLINK):
                        raise ArchiveUnsafeError(
                            f"{self._shown(parts[: depth + 1])} in {self.root} is a link or not a directory;"
                            " nothing is written through it"
                        ) from error
                    raise
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _clear(self, parent_fd: int, name: str, parts: tuple[str, ...]) -> None:
        """Removes what the entry replaces (a file or a link, never a directory)."""
        try:
            if stat.S_ISDIR(os.lstat(name, dir_fd=parent_fd).st_mode):
                raise ArchiveUnsafeError(f"archive entry {self._shown(parts)!r} would replace a directory in {self.root}")
            os.unlink(name, dir_fd=parent_fd)
        except FileNotFoundError:
            pass

    def _place(self, parts: tuple[str, ...], *, is_directory: bool) -> None:
        for depth in range(1, len(parts)):
            if parts[:depth] in self.non_directories:
                raise ArchiveUnsafeError(
                    f"archive entry {self._shown(parts)!r} goes under {self._shown(parts[:depth])!r},"
                    " which the archive makes a file or a link"
                )
            self.parents.add(parts[:depth])
        if not is_directory:
            if parts in self.parents:
                raise ArchiveUnsafeError(
                    f"archive entry {self._shown(parts)!r} is a file or a link, and the archive puts entries under it"
                )
            self.non_directories.add(parts)

    def add(self, archive: tarfile.TarFile, member: tarfile.TarInfo) -> None:
        parts = _entry_parts(member.name, "entry")
        if not parts:
            return  # the folder itself
        if not (member.isdir() or member.isreg() or member.issym() or member.islnk()):
            raise ArchiveUnsafeError(f"archive entry {member.name!r} is a device or a pipe, which is not unpacked")
        self._place(parts, is_directory=member.isdir())
        if member.isdir():
            os.close(self._open_directory(parts, create=True))
            self.directory_modes[parts] = member.mode & 0o777
        elif member.issym():
            if member.linkname == "" or member.linkname.startswith("/"):
                raise ArchiveUnsafeError(f"archive link {member.name!r} -> {member.linkname!r} points outside {self.root}")
            self.links[parts] = member.linkname
        elif member.islnk():
            self._hard_link(parts, _entry_parts(member.linkname, "hard link target"), member)
        else:
            self._file(archive, member, parts)

    def _file(self, archive: tarfile.TarFile, member: tarfile.TarInfo, parts: tuple[str, ...]) -> None:
        if self.written + member.size > self.max_bytes:
            raise _too_large(self.max_bytes, f"the archive (at {member.name!r})")
        source = archive.extractfile(member)
        assert source is not None  # a regular file always has a reader
        parent_fd = self._open_directory(parts[:-1], create=True)
        try:
            self._clear(parent_fd, parts[-1], parts)
            fd = os.open(
                parts[-1],
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0),
                0o600,
                dir_fd=parent_fd,
            )
        finally:
            os.close(parent_fd)
        with os.fdopen(fd, "wb") as output:
            while chunk := source.read(_CHUNK_BYTES):
                self.written += len(chunk)
                if self.written > self.max_bytes:
                    raise _too_large(self.max_bytes, f"the archive (at {member.name!r})")
                output.write(chunk)
            # No setuid, setgid or sticky bit from a sandbox.
            os.fchmod(output.fileno(), member.mode & 0o777)
            os.utime(output.fileno(), (member.mtime, member.mtime))
        self.files.add(parts)

    def _hard_link(self, parts: tuple[str, ...], target: tuple[str, ...], member: tarfile.TarInfo) -> None:
        if target not in self.files:
            raise ArchiveUnsafeError(
                f"archive hard link {member.name!r} -> {member.linkname!r} is not to a file of this archive"
            )
        source_fd = self._open_directory(target[:-1], create=False)
        try:
            parent_fd = self._open_directory(parts[:-1], create=True)
            try:
                self._clear(parent_fd, parts[-1], parts)
                os.link(target[-1], parts[-1], src_dir_fd=source_fd, dst_dir_fd=parent_fd, follow_symlinks=False)
            finally:
                os.close(parent_fd)
        finally:
            os.close(source_fd)
        self.files.add(parts)

    def _link_at(self, parts: tuple[str, ...]) -> str | None:
        """The target of the link at ``parts``: one of the archive's, else one already in the folder."""
        if parts in self.links:
            return self.links[parts]
        try:
            parent_fd = self._open_directory(parts[:-1], create=False)
        except (ArchiveUnsafeError, FileNotFoundError):
            return None  # not there (or under a file): nothing there redirects the lookup
        try:
            return os.readlink(parts[-1], dir_fd=parent_fd)
        except OSError:
            return None  # not there, or not a link
        finally:
            os.close(parent_fd)

    def _stays_inside(self, link: tuple[str, ...], target: str) -> bool:
        """Follows ``target`` as the kernel would, one segment at a time, without the kernel."""
        resolved = list(link[:-1])
        pending = target.split("/")
        hops = 0
        while pending:
            segment = pending.pop(0)
            if segment in ("", "."):
                continue
            if segment == "..":
                if not resolved:
                    return False
                resolved.pop()
                continue
            resolved.append(segment)
            found = self._link_at(tuple(resolved))
            if found is None:
                continue
            hops += 1
            if hops > _MAX_LINK_HOPS or found.startswith("/") or found == "":
                return False
            resolved.pop()
            pending[0:0] = found.split("/")
        return True

    def finish(self) -> None:
        """Makes the archive's links, once each is known to stay inside; then the directories' modes."""
        for parts, target in self.links.items():
            if not self._stays_inside(parts, target):
                raise ArchiveUnsafeError(
                    f"archive link {self._shown(parts)!r} -> {target!r} points outside {self.root}; no link was made"
                )
        for parts, target in self.links.items():
            parent_fd = self._open_directory(parts[:-1], create=True)
            try:
                self._clear(parent_fd, parts[-1], parts)
                os.symlink(target, parts[-1], dir_fd=parent_fd)
            finally:
                os.close(parent_fd)
        # Deepest first, so a directory made read-only does not stop the ones under it.
        for parts, mode in sorted(self.directory_modes.items(), key=lambda item: -len(item[0])):
            fd = self._open_directory(parts, create=False)
            try:
                os.fchmod(fd, mode)
            finally:
                os.close(fd)


def extract_stream(
    stream: BinaryIO, directory: str | os.PathLike[str], *, max_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES
) -> None:
    """Unpacks a tar stream into a local directory, refusing entries that would leave it.

    Raises :class:`ArchiveUnsafeError` for an absolute or ``..`` name, an entry through a link
    or under one the archive makes, a link whose target leaves the directory, a device or a
    pipe; :class:`FileTooLargeError` once its files pass ``max_bytes`` in all. Entries before the
    refused one stay written (at most ``max_bytes``); the archive's links are made only if all are safe.
    """
    extraction = _Extraction(directory, max_bytes)
    try:
        with tarfile.open(fileobj=stream, mode="r|") as archive:
            for member in archive:
                try:
                    extraction.add(archive, member)
                except ValueError as error:  # a name the file system cannot hold (a NUL byte)
                    raise ArchiveUnsafeError(f"archive entry {member.name!r}: {error}") from error
        extraction.finish()
    finally:
        extraction.close()
