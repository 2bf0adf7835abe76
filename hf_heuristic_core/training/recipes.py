"""Named pruning recipes: the paper's settings and the short-run settings, each written once.

"paper" is *The Heuristic Core*'s recipe (appendix B, checked against its released code): the defaults of
`PruningConfig` and `PruningArguments`. It needs its ~9000 steps: with `log_alpha` initialized at 10 nearly every
hard-concrete sample clips to 1, gradients start tiny, and Adam moves the multipliers by about their learning rate per
step whatever the gap.

"short" is for runs of a few hundred steps (measured in README "Short runs"): `log_alpha` starts at 3, the penalty
uses the expected L0 (CoFi's) and the multipliers learn at 0.1, and the teacher's logits are cached once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["RECIPES", "Recipe", "get_recipe"]


@dataclass(frozen=True)
class Recipe:
    """Settings of `PruningConfig` (`config`) and `PruningArguments` (`arguments`) that differ from the defaults."""

    name: str
    config: dict[str, Any] = field(default_factory=dict)
    arguments: dict[str, Any] = field(default_factory=dict)
    description: str = ""


RECIPES: dict[str, Recipe] = {
    "paper": Recipe("paper", description="The Heuristic Core's recipe (appendix B): init 10, sampled L0 penalty, "
                                         "multiplier lr 1.0; needs ~9000 steps."),
    "short": Recipe("short", config={"init_mean": 3.0},
                    arguments={"sparsity_penalty": "expected", "reg_learning_rate": 0.1, "warmup_steps": 10,
                               "teacher": "cached"},
                    description="For a few hundred steps: init 3, expected-L0 penalty, multiplier lr 0.1, "
                                "cached teacher."),
}


def get_recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise ValueError(f"Unknown pruning recipe {name!r}; choose one of {sorted(RECIPES)}.")
    return RECIPES[name]
