"""Stand-in of ``nemo_gym.sandbox.config`` (see ``nemo_gym/__init__.py``): named ``sandbox:`` blocks."""

from collections.abc import Mapping
from typing import Any

RESERVED_KEYS = frozenset({"default_metadata"})


def _block(sandbox_provider: str | Mapping[str, Any], named_configs: Mapping[str, Any] | None) -> dict[str, Any]:
    if isinstance(sandbox_provider, str):
        block = (named_configs or {}).get(sandbox_provider)
        if block is None:
            raise ValueError(f"Sandbox provider reference {sandbox_provider!r} is not defined in the merged config")
        return dict(block)
    if isinstance(sandbox_provider, Mapping):
        return dict(sandbox_provider)
    raise TypeError("sandbox_provider must be a name reference or a single-key provider mapping")


def resolve_provider_config(sandbox_provider: str | Mapping[str, Any], named_configs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    block = _block(sandbox_provider, named_configs)
    keys = [key for key in block if key not in RESERVED_KEYS]
    if len(keys) != 1:
        raise ValueError(f"Sandbox provider config must have exactly one provider key, got {keys!r}")
    return {keys[0]: block[keys[0]]}


def resolve_provider_metadata(sandbox_provider: str | Mapping[str, Any], named_configs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    metadata = _block(sandbox_provider, named_configs).get("default_metadata") or {}
    if not isinstance(metadata, Mapping):
        raise ValueError("Sandbox 'default_metadata' must be a mapping")
    return dict(metadata)
