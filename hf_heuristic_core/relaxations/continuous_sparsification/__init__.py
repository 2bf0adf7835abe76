"""Continuous sparsification (Lepori et al.): `settings` (torch-free, composed into `PruningConfig`) and
`relaxation` (the torch side).

The relaxation module is imported on first attribute access, so importing the settings (a config, `--help`) never
imports torch; `from hf_heuristic_core.relaxations.continuous_sparsification import X` keeps working for every name
it defines.
"""

from __future__ import annotations

from ..._lazy import lazy_exports
from . import settings
from .settings import *  # noqa: F401,F403 (the settings names)
from .settings import ContinuousSparsificationSettings  # noqa: F401 (the settings class, torch-free)


# The names of `relaxation` (imported on first use) and of `settings`.
_LAZY_NAMES = ("ContinuousSparsification", "beta_after_epochs")
__all__ = [*_LAZY_NAMES, *settings.__all__]


__getattr__, __dir__ = lazy_exports(__name__, {"ContinuousSparsification": "relaxation", "beta_after_epochs": "beta"},
                                     fallback="relaxation")
