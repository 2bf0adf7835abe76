"""The `unit` granularity: one mask per attention head and one per whole MLP block (*The Heuristic Core*'s units)."""

from .granularity import UnitGranularity

__all__ = ["UnitGranularity"]
