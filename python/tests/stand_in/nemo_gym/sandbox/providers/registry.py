"""Stand-in of ``nemo_gym.sandbox.providers.registry`` (see ``nemo_gym/__init__.py``).

Lookup as NeMo Gym documents it: explicit registrations, then built-ins (none in the stand-in),
then entry points of ``nemo_gym.sandbox_providers``; two entry points of one name raise.
"""

from collections.abc import Callable, Mapping
from importlib.metadata import entry_points
from typing import Any

ENTRY_POINT_GROUP = "nemo_gym.sandbox_providers"

_REGISTERED: dict[str, type] = {}
_ENTRY_POINTS: dict[str, Callable[[], type]] | None = None


def _entry_point_loaders() -> dict[str, Callable[[], type]]:
    global _ENTRY_POINTS
    if _ENTRY_POINTS is None:
        found: dict[str, Callable[[], type]] = {}
        for point in entry_points(group=ENTRY_POINT_GROUP):
            if point.name in found:
                raise ValueError(f"Duplicate sandbox provider entry point {point.name!r}")
            found[point.name] = point.load
        _ENTRY_POINTS = found
    return _ENTRY_POINTS


def register_provider(name: str, provider_class: type, *, override: bool = False) -> None:
    if not name:
        raise ValueError("Provider name must be non-empty")
    if name in _REGISTERED and not override:
        raise ValueError(f"Sandbox provider {name!r} is already registered")
    _REGISTERED[name] = provider_class


def get_provider_class(name: str) -> type:
    if name in _REGISTERED:
        return _REGISTERED[name]
    loader = _entry_point_loaders().get(name)
    if loader is None:
        raise ValueError(f"Unknown sandbox provider {name!r}. Available providers: {', '.join(list_providers()) or '<none>'}")
    return loader()


def create_provider(config: Mapping[str, Any]) -> Any:
    if len(config) != 1:
        raise ValueError("Sandbox provider config must contain exactly one provider name")
    name, options = next(iter(config.items()))
    if options is None:
        options = {}
    if not isinstance(options, Mapping):
        raise TypeError(f"Sandbox provider {name!r} config must be a mapping")
    return get_provider_class(name)(**dict(options))


def list_providers() -> list[str]:
    return sorted({*_REGISTERED, *_entry_point_loaders()})
