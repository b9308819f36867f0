"""Framework-agnostic GPU activity capture and the columnar event model. Imports no OpenTelemetry.

Importing the package is cheap: its names (``load_profile``, ``Profile``, ``EventBatch``...) are
loaded from their modules on first use (PEP 562) and bound here, so ``import cuda_tracer.X`` of a
light module (``private_files``, ``terminal_lines``) never pulls numpy in.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .loading import load_profile
    from .model.events import EventBatch, Kind, MemcpyKind, SyncKind
    from .profile import Profile, RankProfile, TraceError

_HOMES = {"EventBatch": "model.events", "Kind": "model.events", "MemcpyKind": "model.events",
          "SyncKind": "model.events",
          "Profile": "profile", "RankProfile": "profile", "TraceError": "profile",
          "load_profile": "loading"}
"""Each public name -> the module (in this package) that defines it."""

__all__ = list(_HOMES)


def __getattr__(name: str) -> Any:
    """Load ``name`` from its module on first use and bind it here (later look-ups are plain)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
