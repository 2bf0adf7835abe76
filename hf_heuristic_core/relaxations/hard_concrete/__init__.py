"""Hard-concrete masks (Louizos et al. 2018): `settings` (torch-free, composed into `PruningConfig`) and
`relaxation` (the torch side).

The relaxation module is imported on first attribute access, so importing the settings (a config, `--help`) never
imports torch; `from hf_heuristic_core.relaxations.hard_concrete import X` keeps working for every name
it defines.
"""

from __future__ import annotations

from ..._lazy import lazy_exports
from . import settings
from .settings import *  # noqa: F401,F403 (the settings names)
from .settings import HardConcreteSettings  # noqa: F401 (the settings class, torch-free)


# The names of `relaxation` (imported on first use) and of `settings`.
_LAZY_NAMES = ("COFI_SOFT_MASK_SCALE", "HardConcrete")
__all__ = [*_LAZY_NAMES, *settings.__all__]


__getattr__, __dir__ = lazy_exports(__name__, dict.fromkeys(_LAZY_NAMES, "relaxation"), fallback="relaxation")
