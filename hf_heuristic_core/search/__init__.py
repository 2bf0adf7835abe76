"""Effective size over fine-tuning: the search of one checkpoint, the resumable tracker and the Trainer callback.

`settings` (what a search is asked), `strategies` (grid / climb / nested, a registry), `climb` (the climbing run's
schedule), `evaluate` (exact early stopping), `result`, `masks` (re-scoring), `run` (`search_effective_size`),
`tracking` (over checkpoints, resumable) and `callback` (inside a fine-tuning `Trainer`). `defaults` holds the
strategy names and defaults without importing torch, for the CLI's help.

Names are imported from their modules on first use, so `search.defaults` stays torch-free.
"""

from __future__ import annotations

import importlib
from typing import Any

_STRATEGY_NAMES = ("STRATEGIES", "SearchStrategy", "get_strategy", "register_strategy")
_RUN_NAMES = (
    "CHEAP_RUN_ARGUMENTS",
    "DEFAULT_SPARSITIES",
    "DEFAULT_STEPS",
    "DEFAULT_STRATEGY",
    "SEARCH_STRATEGIES",
    "SHORT_RUN_ARGUMENTS",
    "ClimbSchedule",
    "EffectiveSizeSearch",
    "EvaluationOptions",
    "LevelClimb",
    "PruningSetup",
    "SearchSettings",
    "check_groups",
    "check_seeds",
    "check_sparsities",
    "search_effective_size",
    "search_inputs",
    "search_pruning_arguments",
)   # search.run.__all__ (a test keeps them equal)

__all__ = [*_RUN_NAMES, *_STRATEGY_NAMES]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = ".strategies" if name in _STRATEGY_NAMES else ".run"
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value
