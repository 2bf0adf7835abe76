"""Gumbel-sigmoid settings (torch-free): Csordás' keep probability 0.9 at init, tau 1, 4 mask samples per batch,
alpha 1e-4, eval 1[l > 0]."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..settings import RelaxationSettings

__all__ = ["GumbelSigmoidSettings"]


@dataclass(kw_only=True)
class GumbelSigmoidSettings(RelaxationSettings):
    """Initial keep probability and temperature (Csordás et al.)."""

    paper_binarization: ClassVar[str] = "threshold"
    default_mask_samples: ClassVar[int] = 4
    default_penalty_weight: ClassVar[float | None] = 1e-4

    gumbel_init_prob: float = field(default=0.9, metadata={"help": "Keep probability at init (Csordás: 0.9)."})
    gumbel_tau: float = field(default=1.0, metadata={"help": "Gumbel-sigmoid temperature (Csordás: 1)."})

    def validate(self) -> None:
        if not (0.0 < self.gumbel_init_prob < 1.0 and self.gumbel_tau > 0):
            raise ValueError(f"PruningConfig: gumbel_init_prob must be in (0, 1) and gumbel_tau > 0, got "
                             f"{self.gumbel_init_prob}, {self.gumbel_tau} (Csordás: 0.9, 1).")
