"""The package's PEP 517 build backend: a wheel and an sdist from pyproject.toml with the standard
library alone.

Why our own: the package is pure Python with no dependency, and a backend from the index makes
every install ask the index for it (setuptools, then `wheel` for setuptools older than 70.1,
whose absence is pip's "invalid command 'bdist_wheel'" in a fresh virtual environment with
`--no-build-isolation`; a fresh 3.12+ one has no setuptools at all). This one needs nothing
installed, so `pip install`, `pip wheel`, `uv pip install`, `uv build` and `python -m build` work
offline, with or without build isolation, on every Python the package supports.

It knows the `[project]` keys this package uses and refuses any other (`dynamic` included), so a
key added to pyproject.toml is never silently left out of the metadata. Archives are reproducible:
sorted entries, fixed modes and times (SOURCE_DATE_EPOCH when set).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import os
import re
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path

__all__ = [
    "build_editable",
    "build_sdist",
    "build_wheel",
    "get_requires_for_build_editable",
    "get_requires_for_build_sdist",
    "get_requires_for_build_wheel",
]

# The [project] keys written into the metadata; any other is refused.
_PROJECT_KEYS = {
    "name",
    "version",
    "description",
    "readme",
    "license",
    "requires-python",
    "dependencies",
    "optional-dependencies",
    "entry-points",
    "scripts",
    "urls",
    "classifiers",
    "keywords",
}
# What the sdist carries beside the packages: what a build from it reads.
_SDIST_FILES = ("pyproject.toml", "README.md", "build_backend/gym_sandboxd_build.py")
# Zip's epoch: the earliest time a zip entry can hold.
_ZIP_EPOCH = 315532800
_WHEEL_TAG = "py3-none-any"


class BuildError(Exception):
    """pyproject.toml asks for something this backend does not do."""


def _source_epoch() -> int:
    return max(int(os.environ.get("SOURCE_DATE_EPOCH", _ZIP_EPOCH)), _ZIP_EPOCH)


class _Project:
    def __init__(self, root: Path) -> None:
        self.root = root
        document = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
        project = document.get("project", {})
        unknown = sorted(set(project) - _PROJECT_KEYS)
        if unknown:
            raise BuildError(f"[project] keys this backend does not write: {', '.join(unknown)}")
        for key in ("name", "version"):
            if not isinstance(project.get(key), str):
                raise BuildError(f"[project].{key} must be a string")
        self.project = project
        self.name: str = project["name"]
        self.version: str = project["version"]
        # The file name form of the name (PEP 427, PEP 625).
        self.stem = f"{re.sub(r'[-_.]+', '_', self.name).lower()}-{self.version}"
        tool = document.get("tool", {}).get("gym_sandboxd_build", {})
        packages = tool.get("packages")
        if not isinstance(packages, list) or not packages or not all(isinstance(p, str) for p in packages):
            raise BuildError("[tool.gym_sandboxd_build].packages must list the package folders")
        self.packages: list[str] = packages

    def package_files(self) -> list[str]:
        """The packages' files, relative to the root, sorted; compiled files left out."""
        files: list[str] = []
        for package in self.packages:
            folder = self.root / package
            if folder.is_symlink() or not (folder / "__init__.py").is_file():
                raise BuildError(f"{package} is not a package folder")
            for path in folder.rglob("*"):
                relative = path.relative_to(self.root)
                if "__pycache__" in relative.parts or path.suffix in (".pyc", ".pyo"):
                    continue
                if path.is_symlink():
                    raise BuildError(f"{relative} is a symbolic link: a package holds files only")
                if path.is_file():
                    files.append(relative.as_posix())
        return sorted(files)

    def metadata(self) -> str:
        """Core metadata (METADATA in a wheel, PKG-INFO in an sdist)."""
        project = self.project
        lines = ["Metadata-Version: 2.1", f"Name: {self.name}", f"Version: {self.version}"]
        if "description" in project:
            lines.append(f"Summary: {project['description']}")
        license_ = project.get("license")
        if isinstance(license_, dict) and "text" in license_:
            lines.append(f"License: {license_['text']}")
        elif license_ is not None:
            raise BuildError("[project].license: only { text = ... } is written")
        if project.get("keywords"):
            lines.append(f"Keywords: {','.join(project['keywords'])}")
        lines += [f"Classifier: {classifier}" for classifier in project.get("classifiers", [])]
        lines += [f"Project-URL: {label}, {url}" for label, url in project.get("urls", {}).items()]
        if "requires-python" in project:
            lines.append(f"Requires-Python: {project['requires-python']}")
        lines += [f"Requires-Dist: {requirement}" for requirement in project.get("dependencies", [])]
        for extra, requirements in project.get("optional-dependencies", {}).items():
            lines.append(f"Provides-Extra: {extra}")
            for requirement in requirements:
                requirement, _, marker = requirement.partition(";")
                condition = f'({marker.strip()}) and extra == "{extra}"' if marker.strip() else f'extra == "{extra}"'
                lines.append(f"Requires-Dist: {requirement.strip()}; {condition}")
        readme = project.get("readme")
        body = ""
        if readme is not None:
            if not isinstance(readme, str) or not readme.endswith(".md"):
                raise BuildError("[project].readme: only a Markdown file name is written")
            lines.append("Description-Content-Type: text/markdown")
            body = "\n" + (self.root / readme).read_text(encoding="utf-8")
        return "\n".join(lines) + "\n" + body

    def entry_points(self) -> str | None:
        groups: dict[str, dict[str, str]] = dict(self.project.get("entry-points", {}))
        for group in ("console_scripts", "gui_scripts"):
            if group in groups:
                raise BuildError(f"[project.entry-points].{group}: use [project].scripts")
        if "scripts" in self.project:
            groups = {"console_scripts": self.project["scripts"], **groups}
        if not groups:
            return None
        text = ""
        for group, entries in groups.items():
            text += f"[{group}]\n" + "".join(f"{name} = {target}\n" for name, target in entries.items()) + "\n"
        return text


class _Wheel:
    """A wheel's entries, written in one pass with their RECORD last."""

    def __init__(self, path: Path, dist_info: str) -> None:
        self.path = path
        self.dist_info = dist_info
        self.entries: list[tuple[str, bytes]] = []

    def add(self, name: str, data: bytes) -> None:
        self.entries.append((name, data))

    def close(self) -> None:
        rows = [f"{name},sha256={_digest(data)},{len(data)}" for name, data in self.entries]
        record = f"{self.dist_info}/RECORD"
        rows.append(f"{record},,")
        date_time = time.gmtime(_source_epoch())[:6]
        with zipfile.ZipFile(self.path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
            for name, data in [*self.entries, (record, ("\n".join(rows) + "\n").encode("utf-8"))]:
                entry = zipfile.ZipInfo(name, date_time=date_time)
                entry.external_attr = 0o100644 << 16
                entry.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(entry, data)


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def _write_wheel(wheel_directory: str, editable: bool) -> str:
    # Frontends run the hooks in the folder holding pyproject.toml (PEP 517).
    project = _Project(Path.cwd())
    dist_info = f"{project.stem}.dist-info"
    filename = f"{project.stem}-{_WHEEL_TAG}.whl"
    wheel = _Wheel(Path(wheel_directory) / filename, dist_info)
    if editable:
        # The source folder on sys.path: edits show without a reinstall (PEP 660).
        wheel.add(f"_{project.stem.split('-')[0]}_editable.pth", f"{project.root.resolve()}\n".encode())
    else:
        for relative in project.package_files():
            wheel.add(relative, (project.root / relative).read_bytes())
    wheel.add(f"{dist_info}/METADATA", project.metadata().encode("utf-8"))
    generator = "gym_sandboxd_build (in-tree)"
    wheel_file = f"Wheel-Version: 1.0\nGenerator: {generator}\nRoot-Is-Purelib: true\nTag: {_WHEEL_TAG}\n"
    wheel.add(f"{dist_info}/WHEEL", wheel_file.encode("ascii"))
    entry_points = project.entry_points()
    if entry_points is not None:
        wheel.add(f"{dist_info}/entry_points.txt", entry_points.encode("utf-8"))
    wheel.close()
    return filename


def build_wheel(
    wheel_directory: str, config_settings: dict | None = None, metadata_directory: str | None = None
) -> str:
    return _write_wheel(wheel_directory, editable=False)


def build_editable(
    wheel_directory: str, config_settings: dict | None = None, metadata_directory: str | None = None
) -> str:
    return _write_wheel(wheel_directory, editable=True)


def build_sdist(sdist_directory: str, config_settings: dict | None = None) -> str:
    project = _Project(Path.cwd())
    filename = f"{project.stem}.tar.gz"
    files = sorted(set(_SDIST_FILES) | set(project.package_files()))
    epoch = _source_epoch()

    def add(archive: tarfile.TarFile, name: str, data: bytes) -> None:
        entry = tarfile.TarInfo(f"{project.stem}/{name}")
        entry.size, entry.mtime, entry.mode = len(data), epoch, 0o644
        entry.uname = entry.gname = ""
        archive.addfile(entry, io.BytesIO(data))

    with open(Path(sdist_directory) / filename, "wb") as file:
        # gzip's own header time fixed too: the same tree gives the same bytes.
        with gzip.GzipFile(filename="", mode="wb", fileobj=file, mtime=epoch) as compressed:
            with tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as archive:
                for relative in files:
                    add(archive, relative, (project.root / relative).read_bytes())
                add(archive, "PKG-INFO", project.metadata().encode("utf-8"))
    return filename


def get_requires_for_build_wheel(config_settings: dict | None = None) -> list[str]:
    return []


def get_requires_for_build_editable(config_settings: dict | None = None) -> list[str]:
    return []


def get_requires_for_build_sdist(config_settings: dict | None = None) -> list[str]:
    return []
