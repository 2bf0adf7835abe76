"""`hf-heuristic-core study`: the heuristic-core study end to end (fine-tune, track, prune x seeds, analyze).

Names are imported on first use (`study.run` itself is light: torch loads when a study runs).
"""

from __future__ import annotations

from .._lazy import lazy_exports

__all__ = ["StudyArguments", "run_study", "write_study_report"]


__getattr__, _ = lazy_exports(__name__, dict.fromkeys(__all__, "run"))
