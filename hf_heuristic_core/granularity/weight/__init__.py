"""The `weight` granularity: one mask logit per parameter entry of selected Linear / Conv1D modules."""

from .granularity import WeightGranularity
from .selection import select_parameters

__all__ = ["WeightGranularity", "select_parameters"]
