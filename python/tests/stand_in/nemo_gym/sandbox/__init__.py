"""Stand-in of ``nemo_gym.sandbox`` (see ``nemo_gym/__init__.py``): the public names."""

from nemo_gym.sandbox.api import AsyncSandbox, Sandbox
from nemo_gym.sandbox.config import resolve_provider_config, resolve_provider_metadata
from nemo_gym.sandbox.providers import (
    ConnectableProvider,
    ExecResult,
    SandboxCreateError,
    SandboxCreateVerificationError,
    SandboxEndpoint,
    SandboxExecResult,
    SandboxHandle,
    SandboxProvider,
    SandboxResources,
    SandboxSpec,
    SandboxStatus,
    SupportsSandboxEndpoint,
    SupportsSandboxPty,
    create_provider,
    get_provider_class,
    list_providers,
    register_provider,
)

__all__ = [
    "AsyncSandbox", "ConnectableProvider", "ExecResult", "Sandbox", "SandboxCreateError",
    "SandboxCreateVerificationError", "SandboxEndpoint", "SandboxExecResult", "SandboxHandle",
    "SandboxProvider", "SandboxResources", "SandboxSpec", "SandboxStatus", "SupportsSandboxEndpoint",
    "SupportsSandboxPty", "create_provider", "get_provider_class", "list_providers", "register_provider",
    "resolve_provider_config", "resolve_provider_metadata",
]  # fmt: skip
