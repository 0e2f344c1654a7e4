"""What a NeMo Gym ``SandboxSpec`` becomes for the daemon (its metadata as labels, its paths absolute), and the provider's errors."""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from typing import Any

from ._nemo_types import SandboxCreateError, SandboxCreateVerificationError
from .errors import GymError

# A label the provider puts on every sandbox it makes, to find them.
SANDBOX_LABEL = ("nemo-gym.sandbox", "1")
_LABEL_KEY = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?$")


class GymSandboxdCreateError(SandboxCreateError):
    """The daemon refused or failed the create; ``gym_error`` is its error when it answered one."""

    def __init__(self, message: str, gym_error: GymError | None = None) -> None:
        super().__init__(message)
        self.gym_error = gym_error


class GymSandboxdCreateVerificationError(SandboxCreateVerificationError):
    """The sandbox never became ready (its readiness probe failed, or the wait ran out)."""

    def __init__(self, message: str, gym_error: GymError | None = None) -> None:
        super().__init__(message)
        self.gym_error = gym_error


class SandboxFileError(RuntimeError):
    """An upload or download failed (NeMo Gym's providers raise RuntimeError for these)."""

    def __init__(self, message: str, gym_error: GymError | None = None) -> None:
        super().__init__(message)
        self.gym_error = gym_error


def _label_text(text: str) -> str:
    """A label value made from any text (as the daemon's own toLabelValue does)."""
    value = re.sub(r"[^A-Za-z0-9._-]", "-", str(text))[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value)


def _labels(metadata: Mapping[str, Any]) -> dict[str, str]:
    """``SandboxSpec.metadata`` as the daemon's labels: keys lower-cased, values made label-safe."""
    labels: dict[str, str] = {}
    for key, value in metadata.items():
        label_key = _label_text(str(key).lower()).lower()
        if not _LABEL_KEY.match(label_key):
            raise GymSandboxdCreateError(f"metadata key {key!r} cannot be a label (1-63 of a-z, 0-9, '.', '_', '-')")
        if label_key in labels:
            raise GymSandboxdCreateError(f"metadata keys collide as the label {label_key!r}")
        labels[label_key] = _label_text(value)
    labels[SANDBOX_LABEL[0]] = SANDBOX_LABEL[1]
    return labels


def _absolute(path: str, workdir: str | None, what: str) -> str:
    if path.startswith("/"):
        return path
    if workdir is None:
        raise ValueError(f"{what} {path!r} is relative and the sandbox has no workdir to resolve it against")
    return posixpath.normpath(posixpath.join(workdir, path))
