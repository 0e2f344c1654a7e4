"""Finding the daemon and its token the way the ``gym`` CLI does.

Order: an explicit ``url`` or ``socket`` (with an explicit ``token``, else ``GYM_TOKEN``, else the
state directory's token); else the state directory: the one given, else ``GYM_STATE_DIR``, else the ``stateDir`` of
the ``GYM_CONFIG`` file, else ``$XDG_STATE_HOME/gym``, else ``~/.local/state/gym``. The running
daemon writes ``daemon.json`` there (its ``url``, or its unix ``socket``) and its token in
``token`` (mode 0600).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from .errors import DaemonUnavailableError, UnauthorizedError, ValidationFailedError

__all__ = ["DaemonAddress", "resolve_state_dir", "find_daemon"]

DAEMON_INFO_FILE = "daemon.json"
TOKEN_FILE = "token"


@dataclass(frozen=True)
class DaemonAddress:
    """Where the daemon listens and the token it wants: exactly one of ``host``/``port`` or ``socket``."""

    token: str
    host: str | None = None
    port: int | None = None
    socket: str | None = None

    @property
    def url(self) -> str | None:
        """``http://host:port`` for TCP, None on a unix socket."""
        if self.host is None:
            return None
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def describe(self) -> str:
        return self.url or f"unix:{self.socket}"


def _config_file_state_dir(config_path: str) -> str | None:
    """The top-level ``stateDir:`` of a YAML config, resolved against its folder.

    The standard library has no YAML parser; the key is a plain top-level scalar in every config
    the project documents, so only that form is read (quoted or not). Any other form is ignored
    and the lookup goes on to the default, which is what the CLI would do for a file without it.
    """
    try:
        text = Path(config_path).read_text(encoding="utf-8")
    except OSError as error:
        raise ValidationFailedError(f"cannot read config file {config_path}: {error}") from error
    for line in text.splitlines():
        if not line.startswith("stateDir:"):
            continue
        value = line[len("stateDir:") :].split(" #", 1)[0].strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        if value:
            return str((Path(config_path).parent / os.path.expanduser(value)).resolve())
    return None


def resolve_state_dir(state_dir: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Path:
    """The state directory as the daemon and the CLI resolve it (see the module's doc)."""
    environment = os.environ if env is None else env
    if state_dir is not None:
        return Path(state_dir)
    if environment.get("GYM_STATE_DIR"):
        return Path(environment["GYM_STATE_DIR"])
    if environment.get("GYM_CONFIG"):
        from_file = _config_file_state_dir(environment["GYM_CONFIG"])
        if from_file is not None:
            return Path(from_file)
    base = environment.get("XDG_STATE_HOME") or str(Path(environment.get("HOME") or Path.home()) / ".local" / "state")
    return Path(base) / "gym"


def _read_token(state_dir: Path) -> str:
    try:
        token = (state_dir / TOKEN_FILE).read_text(encoding="utf-8").strip()
    except OSError as error:
        raise UnauthorizedError(f"cannot read the daemon's token in {state_dir}: {error}") from error
    if not token:
        raise UnauthorizedError(f"the daemon's token file in {state_dir} is empty")
    return token


def _parse_url(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValidationFailedError(f"the daemon's URL must be http://host:port, not {url!r}")
    return parts.hostname, parts.port or 80


def find_daemon(
    *,
    url: str | None = None,
    socket: str | os.PathLike[str] | None = None,
    token: str | None = None,
    state_dir: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> DaemonAddress:
    """The daemon's address and token (see the module's doc for the order).

    Raises :class:`DaemonUnavailableError` when no daemon runs for the state directory and
    :class:`UnauthorizedError` when its token cannot be read.
    """
    if url is not None and socket is not None:
        raise ValidationFailedError("give the daemon's url or its socket, not both")
    # A scoped credential lent by the token holder (docs/api.md, "Scoped access"), as the CLI reads it.
    if token is None and (os.environ if env is None else env).get("GYM_TOKEN"):
        token = (os.environ if env is None else env)["GYM_TOKEN"]
    if url is not None or socket is not None:
        secret = token if token is not None else _read_token(resolve_state_dir(state_dir, env))
        if socket is not None:
            return DaemonAddress(token=secret, socket=os.fspath(socket))
        host, port = _parse_url(url)  # type: ignore[arg-type]
        return DaemonAddress(token=secret, host=host, port=port)
    directory = resolve_state_dir(state_dir, env)
    try:
        info = json.loads((directory / DAEMON_INFO_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise DaemonUnavailableError(
            f"no daemon is running for state directory {directory}; start one with `gym daemon start` "
            "(or pass state_dir, or set GYM_STATE_DIR)"
        ) from None
    secret = token if token is not None else _read_token(directory)
    if isinstance(info.get("socket"), str):
        return DaemonAddress(token=secret, socket=info["socket"])
    if isinstance(info.get("url"), str):
        host, port = _parse_url(info["url"])
        return DaemonAddress(token=secret, host=host, port=port)
    raise DaemonUnavailableError(f"{directory / DAEMON_INFO_FILE} names neither a url nor a socket")
