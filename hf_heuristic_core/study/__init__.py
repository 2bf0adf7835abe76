"""`hf-heuristic-core study`: the heuristic-core study end to end (fine-tune, track, prune x seeds, analyze).

Names are imported on first use (`study.run` itself is light: torch loads when a study runs).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["StudyArguments", "run_study", "write_study_report"]


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(".run", __name__), name)
    globals()[name] = value
    return value
