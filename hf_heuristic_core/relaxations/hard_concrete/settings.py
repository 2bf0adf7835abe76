"""Hard-concrete settings (torch-free): the recipe's constants, l = -0.1, r = 1.1, beta = 2/3, eps = 1e-6, and
`log_alpha` initialized from N(10, 0.01) (*The Heuristic Core*, appendix B)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..settings import RelaxationSettings

__all__ = ["HardConcreteSettings"]


@dataclass(kw_only=True)
class HardConcreteSettings(RelaxationSettings):
    """The hard-concrete distribution's constants (Louizos et al. 2018, as in CoFi / The Heuristic Core)."""

    init_mean: float = field(default=10.0, metadata={
        "help": "Mean of the initial log_alpha (the paper: 10).", "brief": True,
        "cli_help": "Mean of the initial mask logits (PruningConfig.init_mean). Default: the recipe's (paper 10, short "
                    "3; docs/guides/pruning.md, 'Recipes'). With the short recipe a value of 10 reads as unset."})
    init_std: float = field(default=0.01, metadata={"help": "Std of the initial log_alpha (the paper: 0.01)."})
    temperature: float = field(default=2.0 / 3.0, metadata={"help": "Hard-concrete beta (the paper: 2/3)."})
    limit_left: float = field(default=-0.1, metadata={"help": "Stretch interval's left end l (the paper: -0.1)."})
    limit_right: float = field(default=1.1, metadata={"help": "Stretch interval's right end r (the paper: 1.1)."})
    eps: float = field(default=1e-6, metadata={"help": "Uniform noise is drawn from (eps, 1 - eps)."})

    def validate(self) -> None:
        if not (self.limit_left < 0.0 < 1.0 < self.limit_right):
            raise ValueError(f"PruningConfig: the hard-concrete stretch must satisfy limit_left < 0 < 1 < limit_right, "
                             f"got limit_left={self.limit_left}, limit_right={self.limit_right} "
                             "(the recipe uses -0.1 and 1.1).")
        if not self.temperature > 0:
            raise ValueError(f"PruningConfig: temperature must be > 0 (the recipe uses 2/3), got {self.temperature}.")
        if not 0 < self.eps < 0.5:
            raise ValueError(f"PruningConfig: eps must be in (0, 0.5) (the recipe uses 1e-6), got {self.eps}.")
        if not (math.isfinite(self.init_mean) and math.isfinite(self.init_std) and self.init_std >= 0):
            raise ValueError(f"PruningConfig: init_mean must be finite and init_std finite and >= 0, "
                             f"got {self.init_mean}, {self.init_std}.")
