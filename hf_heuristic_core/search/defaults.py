"""The search's strategy names and defaults, torch-free so that CLI help (and the study's flags) can read them fast."""

from __future__ import annotations

SEARCH_STRATEGIES = ("grid", "climb", "nested")
DEFAULT_STRATEGY = "nested"   # the cheapest; BENCHMARKS.md compares it with the grid
DEFAULT_STEPS = {"grid": 200, "nested": 100}
DEFAULT_SPARSITIES = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
