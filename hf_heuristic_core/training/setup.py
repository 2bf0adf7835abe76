"""`PruningSetup`: how the masks of a series of pruning runs are learned, one object end to end (torch-free).

A workflow that prunes many times (`search_effective_size`, `prune_many`) wraps the model with one `PruningConfig`,
shares `PruningArguments` fields across its runs and takes mean activations once; what it sets per run (the target
sparsity, the seed, the output folder) is passed to `PruningArguments` as typed keywords, never through this
object's `overrides`, which refuse them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..config import PruningConfig

__all__ = ["PER_RUN_ARGUMENTS", "PruningSetup"]

# Set by the workflow for each run; an override of one would silently replace the level or seed being run.
PER_RUN_ARGUMENTS = ("output_dir", "target_sparsity", "seed")


@dataclass
class PruningSetup:
    """`config`: the wrap config (None: the workflow's default); `overrides`: `PruningArguments` fields shared by
    every run (e.g. ``{"per_device_train_batch_size": 32}``); `means_examples`: training examples for the mean
    activations (None: all); `model_class`: the Transformers class a checkpoint folder is loaded with;
    `show_progress`: progress bars of the means and the runs."""

    config: PruningConfig | None = None
    overrides: Mapping[str, Any] = field(default_factory=dict)
    means_examples: int | None = 512
    model_class: Any = None
    show_progress: bool = False

    def __post_init__(self) -> None:
        if self.config is not None and not isinstance(self.config, PruningConfig):
            raise TypeError(f"PruningSetup.config must be a PruningConfig, got {type(self.config).__name__}.")
        if not isinstance(self.overrides, Mapping):
            raise TypeError(f"PruningSetup.overrides must map PruningArguments fields to values, got "
                            f"{type(self.overrides).__name__}.")
        self.overrides = dict(self.overrides)
        reserved = [name for name in PER_RUN_ARGUMENTS if name in self.overrides]
        if reserved:
            raise ValueError(f"pruning_overrides may not set {reserved}: they are set per run (pass the levels as "
                             "sparsities=, the seeds as seeds= and the folder as output_dir= / runs_dir= instead).")
