"""Named pruning recipes: the paper's settings and the short-run settings, each written once.

"paper" is *The Heuristic Core*'s recipe (appendix B, checked against its released code): `log_alpha` initialized at
10, the sampled-L0 penalty, multiplier learning rate 1.0, 200 learning-rate warm-up steps. It needs its ~9000 steps:
with `log_alpha = 10` nearly every hard-concrete sample clips to 1, gradients start tiny, and Adam moves the
multipliers by about their learning rate per step whatever the gap, so a few hundred steps barely move the masks.

"short" is for runs of a few hundred steps (measured in docs/guides/pruning.md, "Recipes"): `log_alpha` starts at 3,
the penalty uses the expected L0 (CoFi's), the multipliers learn at 0.1 and the learning rate warms up over 10 steps.

`PruningTrainer` resolves `PruningArguments.recipe` ("auto": "paper" when the run is at least as long as the paper's
sparsity schedule, else "short") and fills in the settings the user left unset (`TRAINER_FIELDS`, and the mask
init when it is the paper's). A recipe's `teacher` is a resource choice, not a convergence one: the trainer never
applies it; the effective-size search and the study take it from here explicitly.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PAPER_WARMUP_STEPS", "RECIPES", "Recipe", "TRAINER_FIELDS", "get_recipe", "planned_steps",
           "resolve_recipe"]

# The optimization settings a recipe decides when the user leaves them unset.
TRAINER_FIELDS = ("sparsity_penalty", "reg_learning_rate", "warmup_steps")
# warmup_steps is a TrainingArguments number (it cannot be "unset"): the recipe replaces it when it holds this value.
PAPER_WARMUP_STEPS = 200
PAPER_INIT_MEAN = 10.0


@dataclass(frozen=True)
class Recipe:
    """Settings of `PruningConfig` (`config`) and `PruningArguments` (`arguments`) of a named recipe."""

    name: str
    config: dict[str, Any] = field(default_factory=dict)
    arguments: dict[str, Any] = field(default_factory=dict)
    description: str = ""


RECIPES: dict[str, Recipe] = {
    "paper": Recipe("paper", config={"init_mean": PAPER_INIT_MEAN},
                    arguments={"sparsity_penalty": "sampled", "reg_learning_rate": 1.0,
                               "warmup_steps": PAPER_WARMUP_STEPS},
                    description="The Heuristic Core's recipe (appendix B): init 10, sampled L0 penalty, multiplier "
                                "lr 1.0, 200 warm-up steps; needs ~9000 steps."),
    "short": Recipe("short", config={"init_mean": 3.0},
                    arguments={"sparsity_penalty": "expected", "reg_learning_rate": 0.1, "warmup_steps": 10,
                               "teacher": "cached"},
                    description="For a few hundred steps: init 3, expected-L0 penalty, multiplier lr 0.1, 10 warm-up "
                                "steps (and a cached teacher in the search and the study)."),
}


def get_recipe(name: str) -> Recipe:
    if name not in RECIPES:
        raise ValueError(f"Unknown pruning recipe {name!r}; choose one of {sorted(RECIPES)}.")
    return RECIPES[name]


def planned_steps(args: Any, dataset: Any) -> int | None:
    """Optimizer steps a run will take (None when the data has no length)."""
    if args.max_steps is not None and args.max_steps > 0:
        return int(args.max_steps)
    if dataset is None or not hasattr(dataset, "__len__"):
        return None
    per_step = args.per_device_train_batch_size * max(args.gradient_accumulation_steps, 1) * max(args.world_size, 1)
    return math.ceil(len(dataset) / per_step) * math.ceil(args.num_train_epochs)


def resolve_recipe(args: Any, steps: int | None) -> Recipe:
    """The recipe `args.recipe` names; "auto" is "paper" when the run covers the paper's sparsity schedule."""
    name = args.recipe
    if name == "auto":
        name = "paper" if steps is None or steps >= args.paper_sparsity_warmup() else "short"
    return get_recipe(name)


def apply_recipe(args: Any, recipe: Recipe) -> dict[str, Any]:
    """Fill the unset optimization settings of `args` from `recipe`; returns what was set."""
    changed = {}
    for key in TRAINER_FIELDS:
        value = recipe.arguments.get(key, RECIPES["paper"].arguments[key])
        current = getattr(args, key)
        if current is None or (key == "warmup_steps" and current == PAPER_WARMUP_STEPS and value != current):
            setattr(args, key, value)
            changed[key] = value
    return changed
