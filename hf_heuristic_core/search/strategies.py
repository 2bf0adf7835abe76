"""How a search finds each level's subnetwork: strategy objects in a registry, and the runner they share.

* ``grid`` (the paper): one independent `PruningTrainer` run per (sparsity, seed), each from fresh mask logits.
  Cost: ``len(sparsities) * len(seeds) * steps_per_run`` pruning steps (default 200 per run).
* ``climb``: one run per seed whose target climbs through the levels (`ClimbSchedule`).
* ``nested``: one run per seed to the highest level (the target rises over 70% of ``steps_per_run``, default 100,
  then holds); every level's masks are the top-k of that run's final mask logits: nested subnetworks. The default.

A new strategy is a `SearchStrategy` subclass passed to `register_strategy`. Every run is judged by its
`PruningTrainer` (`training.convergence`); the runner keeps the verdict so the search can say, per level and seed,
whether the subnetwork it evaluates came from a converged run.
"""

from __future__ import annotations

import os
from typing import Any, Callable, ClassVar, Mapping

import torch
from transformers import PrinterCallback, ProgressCallback

from .._registry import Registry
from ..evaluation.effective_size import EffectiveSizeError
from ..model import PrunableModel
from ..training.arguments import PruningArguments
from ..training.recipes import RECIPES
from ..training.setup import PruningSetup
from ..training.trainer import PruningTrainer
from .climb import ClimbingTrainer, ClimbSchedule, LevelClimb

__all__ = [
    "CHEAP_RUN_ARGUMENTS",
    "SHORT_RUN_ARGUMENTS",
    "STRATEGIES",
    "ClimbStrategy",
    "GridStrategy",
    "Masks",
    "NestedStrategy",
    "PruningRunner",
    "SearchStrategy",
    "get_strategy",
    "register_strategy",
    "search_pruning_arguments",
]

Masks = dict[str, torch.Tensor]

# Short-run settings measured to work on CPU budgets (see docs/guides/pruning.md, "Recipes"); the paper's defaults
# (log_alpha init 10, multiplier lr 1.0, sampled penalty) need thousands of steps to move the masks at all.
SHORT_RUN_ARGUMENTS = {**RECIPES["short"].arguments, "recipe": "short", "per_device_train_batch_size": 16, "report_to": "none",
                       "save_strategy": "no", "logging_strategy": "no", "disable_tqdm": True}
# Single-run strategies: constant learning rate from the first step (their length is short or not known in advance).
CHEAP_RUN_ARGUMENTS = {"lr_scheduler_type": "constant_with_warmup", "warmup_steps": 0}


def search_pruning_arguments(output_dir: str, target_sparsity: float, max_steps: int, seed: int,
                             overrides: Mapping[str, Any] | None = None, **fixed: Any) -> PruningArguments:
    """`PruningArguments` for one search run: short-run defaults < strategy settings < the caller's overrides. The
    level, the seed and the folder are typed keywords of this run; an override naming one is refused."""
    shared = PruningSetup(overrides=overrides or {}).overrides   # refuses output_dir / target_sparsity / seed
    values: dict[str, Any] = {**SHORT_RUN_ARGUMENTS, **fixed, "max_steps": max_steps, **shared}
    return PruningArguments(output_dir=output_dir, target_sparsity=target_sparsity, seed=seed, **values)


class PruningRunner:
    """Runs pruning on one wrapped model, resetting its masks between runs and sharing the teacher cache."""

    def __init__(self, prunable: PrunableModel, train_dataset: Any, collator: Callable,
                 overrides: Mapping[str, Any], scratch: str) -> None:
        self.prunable, self.train_dataset, self.collator = prunable, train_dataset, collator
        self.overrides, self.scratch = dict(overrides), scratch
        self.teacher_cache = None
        self.count = 0

    def folder(self) -> str:
        self.count += 1
        return os.path.join(self.scratch, f"run-{self.count}")

    def trainer(self, args: PruningArguments, trainer_class: type = PruningTrainer, **kwargs: Any) -> PruningTrainer:
        return trainer_class(model=self.prunable, args=args, train_dataset=self.train_dataset,
                             data_collator=self.collator, teacher_cache=self.teacher_cache, **kwargs)

    def train(self, trainer: PruningTrainer) -> tuple[int, dict[str, Any] | None]:
        """Steps taken, and the trainer's convergence verdict (None when its check was switched off)."""
        for quiet in (PrinterCallback, ProgressCallback):
            trainer.remove_callback(quiet)
        trainer.train()
        if trainer.args.teacher == "cached" and self.teacher_cache is None:
            self.teacher_cache = trainer.teacher_cache
        verdict = getattr(trainer, "convergence", None)
        return int(trainer.state.global_step), (verdict.to_dict() if verdict is not None else None)


class SearchStrategy:
    """Finds every level's binarized masks for one seed. `default_steps` None: the run length comes elsewhere."""

    name: ClassVar[str]
    default_steps: ClassVar[int | None] = None

    def learn(self, runner: PruningRunner, levels: list[float], seed: int, settings: Any
              ) -> tuple[dict[float, Masks], list[dict[str, Any]]]:
        """Masks per level (each pruning exactly its share of units) and one info record per pruning run, each with
        ``steps`` and ``convergence`` (the trainer's verdict dict, or None); a run that found one level only names
        it under ``sparsity``, otherwise the run found every level of the seed."""
        raise NotImplementedError


class GridStrategy(SearchStrategy):
    name = "grid"
    default_steps = 200

    def learn(self, runner, levels, seed, settings):
        masks, runs = {}, []
        steps = int(settings.steps_per_run)
        for level in levels:
            runner.prunable.reset_masks(seed)
            fixed = {"sparsity_warmup_steps": max(1, steps // 2)}
            args = search_pruning_arguments(runner.folder(), level, steps, seed, runner.overrides, **fixed)
            taken, verdict = runner.train(runner.trainer(args))
            masks[level] = runner.prunable.get_masks(binary=True)   # the trainer's final (fixed) masks
            runner.prunable.clear_masks()
            runs.append({"strategy": "grid", "seed": seed, "sparsity": level, "steps": taken,
                         "convergence": verdict})
        return masks, runs


class NestedStrategy(SearchStrategy):
    name = "nested"
    default_steps = 100

    def learn(self, runner, levels, seed, settings):
        """One run to the highest level; every level is the top-k of its final logits."""
        steps = int(settings.steps_per_run)
        runner.prunable.reset_masks(seed)
        fixed = {"sparsity_warmup_steps": max(1, round(0.7 * steps)), **CHEAP_RUN_ARGUMENTS}
        args = search_pruning_arguments(runner.folder(), levels[-1], steps, seed, runner.overrides, **fixed)
        taken, verdict = runner.train(runner.trainer(args))
        runner.prunable.clear_masks()
        masks = {level: runner.prunable.get_masks(binary=True, sparsity=level) for level in levels}
        with torch.no_grad():
            expected = float(runner.prunable.expected_sparsity())
        return masks, [{"strategy": "nested", "seed": seed, "steps": taken, "expected_sparsity": expected,
                        "convergence": verdict}]


class ClimbStrategy(SearchStrategy):
    name = "climb"

    def learn(self, runner, levels, seed, settings):
        schedule: ClimbSchedule = settings.climb
        prunable = runner.prunable
        prunable.reset_masks(seed)
        climb = LevelClimb(levels, prunable.num_units(), schedule)
        args = search_pruning_arguments(runner.folder(), max(levels), climb.max_steps(), seed, runner.overrides,
                                        **CHEAP_RUN_ARGUMENTS)
        taken, verdict = runner.train(runner.trainer(args, ClimbingTrainer, climb=climb))
        while not climb.done:   # the step budget ran out (only with overridden max_steps)
            with torch.no_grad():
                expected = float(prunable.expected_sparsity())
            climb.snapshot(prunable, taken, expected, reached=False)
        prunable.clear_masks()
        masks = dict(climb.snapshots)
        # A level the learned sparsity never reached has no meaningful snapshot (early on, the ranking is mostly the
        # initial noise): take it from the end of the run instead, whose ranking had every step to form.
        for event in climb.events:
            event["masks_from"] = "snapshot" if event["reached"] else "final"
            if not event["reached"]:
                masks[event["sparsity"]] = prunable.get_masks(binary=True, sparsity=event["sparsity"])
        return masks, [{"strategy": "climb", "seed": seed, "steps": taken, "levels": climb.events,
                        "convergence": verdict}]


def _check_strategy(name: str, strategy: Any) -> None:
    if not isinstance(strategy, SearchStrategy) or getattr(strategy, "name", None) != name:
        raise TypeError(f"register_strategy takes a SearchStrategy instance registered under its own name, got "
                        f"{strategy!r} for {name!r}")


STRATEGIES = Registry("search strategy", check=_check_strategy)


def register_strategy(strategy: SearchStrategy) -> SearchStrategy:
    """Make `strategy` available by its name (to `search_effective_size(strategy=...)`, the CLI and the tracker)."""
    if not isinstance(strategy, SearchStrategy) or not getattr(strategy, "name", None):
        raise TypeError(f"register_strategy takes a SearchStrategy instance with a name, got {strategy!r}")
    return STRATEGIES.register(strategy.name, strategy)


def get_strategy(name: str) -> SearchStrategy:
    if name not in STRATEGIES:
        raise EffectiveSizeError(f"strategy must be one of {tuple(STRATEGIES)}, got {name!r}")
    return STRATEGIES[name]


for _strategy in (GridStrategy(), ClimbStrategy(), NestedStrategy()):
    register_strategy(_strategy)
