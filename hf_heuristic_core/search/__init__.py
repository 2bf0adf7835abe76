"""Effective size over fine-tuning: the search of one checkpoint, the resumable tracker and the Trainer callback.

`settings` (what a search is asked), `strategies` (grid / climb / nested, a registry), `climb` (the climbing run's
schedule), `evaluate` (exact early stopping), `result`, `masks` (re-scoring), `run` (`search_effective_size`),
`tracking` (over checkpoints, resumable) and `callback` (inside a fine-tuning `Trainer`). `defaults` holds the
strategy names and defaults without importing torch, for the CLI's help.

Names are imported from their modules on first use, so `search.defaults` stays torch-free.
"""

from __future__ import annotations

from .._lazy import lazy_exports

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


__getattr__, _ = lazy_exports(__name__, {**dict.fromkeys(_RUN_NAMES, "run"),
                                         **dict.fromkeys(_STRATEGY_NAMES, "strategies")})
