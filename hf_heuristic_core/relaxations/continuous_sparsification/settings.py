"""Continuous-sparsification settings (torch-free): Lepori's s init 0, beta 1 -> 200 by an epoch-end schedule,
lambda 1e-8, eval 1[s > 0]."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

from ..settings import RelaxationSettings

__all__ = ["ContinuousSparsificationSettings", "LEPORI_BETA_MAX", "LEPORI_LAMBDA"]

LEPORI_BETA_MAX = 200.0
LEPORI_LAMBDA = 1e-8


@dataclass(kw_only=True)
class ContinuousSparsificationSettings(RelaxationSettings):
    """s init, beta now (the schedule's state) and beta_max (Lepori et al.)."""

    paper_binarization: ClassVar[str] = "threshold"
    default_penalty_weight: ClassVar[float | None] = LEPORI_LAMBDA

    cs_init: float = field(default=0.0, metadata={"help": "Initial mask logit s (Lepori: 0)."})
    cs_beta: float = field(default=1.0, metadata={"help": "Current beta of sigmoid(beta * s) (the schedule's state)."})
    cs_beta_max: float = field(default=LEPORI_BETA_MAX, metadata={"help": "beta after the last epoch (Lepori: 200)."})

    def validate(self) -> None:
        if not (self.cs_beta > 0 and self.cs_beta_max >= 1 and math.isfinite(self.cs_init)):
            raise ValueError(f"PruningConfig: continuous sparsification needs cs_beta > 0, cs_beta_max >= 1 and a "
                             f"finite cs_init, got {self.cs_beta}, {self.cs_beta_max}, {self.cs_init} (Lepori: 1, 200, "
                             "0).")
