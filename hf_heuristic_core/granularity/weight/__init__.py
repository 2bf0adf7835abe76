"""The `weight` granularity: one mask logit per parameter entry of selected Linear / Conv1D modules: `settings`
(torch-free, composed into `PruningConfig`), `granularity` and `selection` (the torch side).

The granularity module is imported on first attribute access, so importing the settings (a config, `--help`) never
imports torch; `from hf_heuristic_core.granularity.weight import X` keeps working for every name it defines.
"""

from __future__ import annotations

from ..._lazy import lazy_exports
from . import settings
from .settings import *
from .settings import WeightSettings

# The names of the torch-side modules (imported on first use), and the module each lives in.
_LAZY_NAMES = {'WeightGranularity': 'granularity', 'select_parameters': 'selection'}
__all__ = [*_LAZY_NAMES, *settings.__all__]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY_NAMES)
