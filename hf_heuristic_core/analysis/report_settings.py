"""`AnalyzeSettings`: everything `analyze` is asked, one object from the caller (or the CLI) to the report (torch-free).

Groups: where the report goes; which core (`core_sparsity`); the ablation table (`ablation`, `ablation_mode`,
`ablation_units`, `max_core_units`, `joint`, `non_core_sample`, `seed`); the attention patterns (`attention`,
`attention_set`, `attention_examples`, `heatmaps`); what overrides manifest.json (`model`, `tokenizer`, `eval_sets`,
`batch_size`, `device`); subtask masks, unfinished folders, circuits, progress bars.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any, Mapping, Sequence

from ..ablation.names import ABLATION_MODES

__all__ = ["AnalyzeSettings"]



@dataclass
class AnalyzeSettings:
    """The settings of one `analyze` call; the fields are `analyze`'s old keyword arguments, with their defaults
    (see `analysis.report.analyze` for what each does)."""

    output_dir: str | os.PathLike | None = None
    core_sparsity: float | None = None
    ablation: bool = True
    ablation_mode: str = "mean"
    ablation_units: Sequence[Any] | None = None
    max_core_units: int | None = None
    joint: Sequence[Sequence[Any]] | None = None
    non_core_sample: int | None = None
    seed: int = 0
    attention: bool = True
    attention_set: str | None = None
    attention_examples: int = 128
    heatmaps: int = 3
    model: Any = None
    tokenizer: Any = None
    eval_sets: Mapping[str, Any] | None = None
    batch_size: int | None = None
    device: str | None = None
    show_progress: bool = True
    subtasks: Mapping[str, str] | None = None
    allow_unfinished: bool = False
    circuits: bool = False

    def __post_init__(self) -> None:
        if self.ablation_mode not in ABLATION_MODES:
            raise ValueError(f"analyze: ablation_mode={self.ablation_mode!r} is not one of {list(ABLATION_MODES)}.")

    @property
    def needs_model(self) -> bool:
        return self.ablation or self.attention or self.circuits

    @classmethod
    def from_keywords(cls, settings: "AnalyzeSettings | None", keywords: Mapping[str, Any]) -> "AnalyzeSettings":
        """The settings object from `analyze`'s old keyword form, or the object given (not both)."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(keywords) - known)
        if unknown:
            raise TypeError(f"analyze() got unexpected keyword argument(s) {unknown}.")
        if settings is None:
            return cls(**keywords)
        if not isinstance(settings, cls):
            raise TypeError(f"analyze: settings must be an AnalyzeSettings, got {type(settings).__name__}.")
        if keywords:
            raise ValueError(f"analyze got settings= and {sorted(keywords)}; set them in the AnalyzeSettings "
                             "object instead.")
        return settings
