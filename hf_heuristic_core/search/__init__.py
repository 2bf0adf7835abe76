"""Effective size over fine-tuning: the search of one checkpoint, the resumable tracker and the Trainer callback.

`settings` (what a search is asked), `strategies` (grid / climb / nested, a registry), `climb` (the climbing run's
schedule), `evaluate` (exact early stopping), `result`, `masks` (re-scoring), `run` (`search_effective_size`),
`tracking` (over checkpoints, resumable) and `callback` (inside a fine-tuning `Trainer`).
"""

from .run import *  # noqa: F401,F403
from .run import __all__ as _run_all
from .strategies import STRATEGIES, SearchStrategy, get_strategy, register_strategy

__all__ = list(_run_all) + ["STRATEGIES", "SearchStrategy", "get_strategy", "register_strategy"]
