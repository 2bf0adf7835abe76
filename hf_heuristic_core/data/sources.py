"""Kept so `from hf_heuristic_core.data.sources import load_table` works: the one table loader is in `.tables`."""

from .tables import load_table

__all__ = ["load_table"]
