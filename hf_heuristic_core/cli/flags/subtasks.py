"""Flags of `hf-heuristic-core subtasks` (torch-free: `--help` is drawn from them; the run is `cli/subtasks.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DESCRIPTION", "SubtasksArguments"]

DESCRIPTION = "Compare subtask masks: per-layer IoU / IoMin, shared fractions, kept share of a full-task mask."


@dataclass
class SubtasksArguments:
    masks: list[str] = field(metadata={"help": "Two or more mask artifact folders (or Hub ids), one per subtask."})
    output_dir: str = field(metadata={"help": "Where to write subtasks.json, subtasks.md and the figure."})
    names: list[str] | None = field(default=None, metadata={"help": "A name per mask (default: folder names)."})
    reference: str | None = field(default=None, metadata={
        "help": "The full-task mask artifact: report |M_k & M_0| / |M_0| per layer for each subtask mask."})
    figure: bool = field(default=True, metadata={"help": "Write the sharing bar chart (needs matplotlib)."})
    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "Write into an --output_dir that holds another run's or another command's files (nothing is "
                "deleted)."})
    allow_unfinished: bool = field(default=False, metadata={
        "help": "Compare masks that are not finished runs' (a mid-run checkpoint-N, masks never fixed); refused "
                "without it."})
