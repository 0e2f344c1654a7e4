"""Stand-in of ``nemo_gym.sandbox.providers`` (see ``nemo_gym/__init__.py``)."""

from nemo_gym.sandbox.providers.base import (
    ConnectableProvider,
    ExecResult,
    SandboxCreateError,
    SandboxCreateVerificationError,
    SandboxEndpoint,
    SandboxExecResult,
    SandboxHandle,
    SandboxProvider,
    SandboxPtySpec,
    SandboxResources,
    SandboxSpec,
    SandboxStatus,
    SupportsSandboxEndpoint,
    SupportsSandboxPty,
)
from nemo_gym.sandbox.providers.registry import create_provider, get_provider_class, list_providers, register_provider

__all__ = [
    "ConnectableProvider", "ExecResult", "SandboxCreateError", "SandboxCreateVerificationError",
    "SandboxEndpoint", "SandboxExecResult", "SandboxHandle", "SandboxProvider", "SandboxPtySpec",
    "SandboxResources", "SandboxSpec", "SandboxStatus", "SupportsSandboxEndpoint", "SupportsSandboxPty",
    "create_provider", "get_provider_class", "list_providers", "register_provider",
]  # fmt: skip
