"""`hf-heuristic-core study`: the heuristic-core study end to end (fine-tune, track, prune x seeds, analyze)."""

from .run import StudyArguments, run_study, write_study_report

__all__ = ["StudyArguments", "run_study", "write_study_report"]
