"""The `unit` granularity: one mask per attention head and one per whole MLP block (*The Heuristic Core*'s units):
`settings` (torch-free, composed into `PruningConfig`) and `granularity` (the torch side).

The granularity module is imported on first attribute access, so importing the settings (a config, `--help`) never
imports torch; `from hf_heuristic_core.granularity.unit import X` keeps working for every name it defines.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import settings
from .settings import *
from .settings import UnitSettings

# The names of the torch-side modules (imported on first use), and the module each lives in.
_LAZY_NAMES = {'UnitGranularity': 'granularity'}
__all__ = [*_LAZY_NAMES, *settings.__all__]


def __getattr__(name: str) -> Any:
    if name not in _LAZY_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_LAZY_NAMES[name]}"), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
