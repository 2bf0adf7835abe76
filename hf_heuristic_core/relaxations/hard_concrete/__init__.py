"""Hard-concrete masks (Louizos et al. 2018): `settings` (torch-free, composed into `PruningConfig`) and
`relaxation` (the torch side).

The relaxation module is imported on first attribute access, so importing the settings (a config, `--help`) never
imports torch; `from hf_heuristic_core.relaxations.hard_concrete import X` keeps working for every name
it defines.
"""

from __future__ import annotations

import importlib
from typing import Any

from . import settings
from .settings import *  # noqa: F401,F403 (the settings names)
from .settings import HardConcreteSettings  # noqa: F401 (the settings class, torch-free)


# The names of `relaxation` (imported on first use) and of `settings`.
_LAZY_NAMES = ("COFI_SOFT_MASK_SCALE", "HardConcrete")
__all__ = [*_LAZY_NAMES, *settings.__all__]


def __getattr__(name: str) -> Any:
    module = importlib.import_module(f"{__name__}.relaxation")
    try:
        return getattr(module, name)
    except AttributeError:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
