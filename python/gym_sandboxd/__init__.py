"""gym-sandboxd's Python package: a typed client of the daemon (sync and async) and a NeMo Gym
sandbox provider (``gym_sandboxd``, found through the ``nemo_gym.sandbox_providers`` entry point).

Standard library only.
"""

from ._tar import DEFAULT_MAX_DOWNLOAD_BYTES
from .aio import AsyncGymClient
from .client import GymClient, Rollout
from .discovery import DaemonAddress, find_daemon, resolve_state_dir
from .errors import GymError

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_MAX_DOWNLOAD_BYTES",
    "AsyncGymClient",
    "DaemonAddress",
    "GymClient",
    "GymError",
    "Rollout",
    "find_daemon",
    "resolve_state_dir",
]
