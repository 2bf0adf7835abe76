"""Effective size over fine-tuning: the search of one checkpoint, the resumable tracker and the Trainer callback.

Names are imported from `search.run` on first use, so `search.defaults` (read by CLI help) stays torch-free.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "DEFAULT_SPARSITIES",
    "DEFAULT_STEPS",
    "DEFAULT_STRATEGY",
    "SEARCH_STRATEGIES",
    "ClimbSchedule",
    "EffectiveSizeSearch",
    "LevelClimb",
    "check_groups",
    "check_seeds",
    "check_sparsities",
    "search_effective_size",
    "search_pruning_arguments",
]   # search.run.__all__ (a test keeps them equal)


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(".run", __name__), name)
    globals()[name] = value
    return value
