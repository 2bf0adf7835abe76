"""Effective size of one checkpoint: prune at several sparsities, judge the subnetworks, apply the definition.

The pieces: `settings` (`SearchSettings`, what is asked), `strategies` (how each level's masks are found: grid,
climb, nested, in a registry), `evaluate` (exact early stopping over the levels), `result` (`EffectiveSizeSearch`),
`masks` (re-scoring stored masks). This module wires them: `search_effective_size`. Means for mean ablation come
from the training data at this checkpoint; the full model is evaluated once.
"""

from __future__ import annotations

import logging
import os
import tempfile
import time
from dataclasses import replace
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import nn

from ..batching import PadCollator
from ..config import PruningConfig
from ..evaluation.effective_size import EffectiveSizeError
from ..evaluation.options import EvaluationOptions
from ..evaluation.subnetwork import full_model_accuracy
from ..model import PrunableModel
from ..training.recipes import RECIPES
from ..training.setup import PruningSetup
from .climb import ClimbingTrainer, ClimbSchedule, LevelClimb
from .evaluate import evaluate_levels
from .masks import all_kept, check_known_masks, save_level, validated_known_masks
from .result import EffectiveSizeSearch, level_key
from .settings import (
    DEFAULT_SPARSITIES,
    DEFAULT_STRATEGY,
    SearchSettings,
    check_groups,
    check_seeds,
    check_sparsities,
)
from .strategies import (
    CHEAP_RUN_ARGUMENTS,
    SHORT_RUN_ARGUMENTS,
    STRATEGIES,
    PruningRunner,
    get_strategy,
    search_pruning_arguments,
)
from ..artifacts import load_base_model

logger = logging.getLogger(__name__)

__all__ = [
    "CHEAP_RUN_ARGUMENTS",
    "DEFAULT_SPARSITIES",
    "DEFAULT_STEPS",
    "DEFAULT_STRATEGY",
    "SEARCH_STRATEGIES",
    "SHORT_RUN_ARGUMENTS",
    "ClimbSchedule",
    "EffectiveSizeSearch",
    "EvaluationOptions",
    "LevelClimb",
    "PruningSetup",
    "SearchSettings",
    "check_groups",
    "check_seeds",
    "check_sparsities",
    "search_effective_size",
    "search_inputs",
    "search_pruning_arguments",
]

# The built-in strategies (kept for callers of the 0.1 names; the registry `strategies.STRATEGIES` is the source).
SEARCH_STRATEGIES = tuple(STRATEGIES)
DEFAULT_STEPS = {name: s.default_steps for name, s in STRATEGIES.items() if s.default_steps is not None}
_ClimbingTrainer = ClimbingTrainer   # old private name
_key = level_key


# The old keyword form: each keyword and the settings object that now carries it.
SETTINGS_KEYWORDS = ("strategy", "sparsities", "seeds", "steps_per_run", "climb", "margin", "early_stopping")
SETUP_KEYWORDS = {"pruning_config": "config", "pruning_overrides": "overrides", "means_examples": "means_examples",
                  "model_class": "model_class", "show_progress": "show_progress"}
EVALUATION_KEYWORDS = {"eval_batch_size": "batch_size", "collate_fn": "collate_fn",
                       "collapse_to_entailment": "collapse_to_entailment", "entailment_id": "entailment_id"}


def search_effective_size(model_or_path: nn.Module | str | os.PathLike, train_dataset: Any,
                          eval_sets: Mapping[str, Any], groups: Mapping[str, Sequence[str]] | None = None, *,
                          settings: SearchSettings | None = None, evaluation: EvaluationOptions | None = None,
                          pruning: PruningSetup | None = None, output_dir: str | os.PathLike | None = None,
                          masks: Mapping[Any, Mapping[Any, Mapping[str, Any]]] | None = None,
                          **keywords: Any) -> EffectiveSizeSearch:
    """Effective size of one model (checkpoint) per group of evaluation sets.

    `model_or_path`: a loaded Transformers model (wrapped for the search and unwrapped afterwards) or a folder / Hub
    id. `train_dataset`: tokenized training data (the means and the pruning KL come from it). `eval_sets`:
    ``{case: tokenized labelled data}``; `groups`: ``{group: [case, ...]}`` (default: one group of every case).
    `settings` (`SearchSettings`): strategy ("nested" default, "climb", "grid"; see `search.strategies`), levels,
    seeds, margin, run length, climb schedule, early stopping. `evaluation` (`EvaluationOptions`): batch size,
    collator (it also pads the pruning and means batches), label collapse. `pruning` (`PruningSetup`): the wrap
    config (default: the short recipe's), the `PruningArguments` fields shared by every run (e.g.
    ``{"per_device_train_batch_size": 32}``), means examples, the model class, progress bars. With `output_dir`,
    every level's masks are saved there as an artifact (``seed-0/sparsity-0.3``).
    The old keywords (``strategy=``, ``sparsities=``, ``pruning_overrides=``, ``eval_batch_size=``, ...) still work:
    they fill in these objects (`search_inputs`).

    Early stopping (default) evaluates each group's levels sparsest first and stops at the first faithful one:
    the same effective sizes as evaluating everything, and the result records which (level, set) pairs ran
    (``evaluated``). Every level's masks are still learned and returned.

    `masks` (``{seed: {sparsity: {kind: mask}}}`` with the kinds `get_masks()` returns, e.g. ``"heads"`` and
    ``"mlps"`` for unit masks; a results entry's ``masks``) re-scores
    subnetworks found earlier instead of pruning: their seeds and sparsities replace the settings' seeds and
    sparsities, the cost is 0 pruning steps, and only the evaluation (with this call's `eval_sets`, `groups` and
    margin) runs.
    """
    settings, evaluation, pruning = search_inputs(settings, evaluation, pruning, groups, keywords)
    if not isinstance(eval_sets, Mapping):
        raise EffectiveSizeError(f"eval_sets must map a case name to labelled data, got {type(eval_sets).__name__}")
    if isinstance(model_or_path, PrunableModel):
        raise TypeError("search_effective_size wraps the model itself; pass the plain Transformers model "
                        "(prunable.model) or a checkpoint folder.")
    known = None
    if masks is not None:
        known = check_known_masks(masks)
        settings = replace(settings, seeds=list(known), sparsities=list(next(iter(known.values()))))
    settings = settings.resolve(eval_sets)
    if train_dataset is None or (hasattr(train_dataset, "__len__") and len(train_dataset) == 0):
        raise EffectiveSizeError("train_dataset is empty; the means and the pruning objective need training data.")
    started = time.perf_counter()
    if isinstance(model_or_path, (str, os.PathLike)):
        model = load_base_model(model_or_path, pruning.model_class)
    else:
        model = model_or_path
    modes = [m.training for m in model.modules()]
    prunable = PrunableModel(model, pruning.config or PruningConfig().with_settings(**RECIPES["short"].config))
    try:
        search = _Search(prunable, train_dataset, eval_sets, settings, evaluation, pruning)
        return search.run(output_dir, started, known)
    finally:
        prunable.unwrap()
        for module, mode in zip(model.modules(), modes):
            module.training = mode


def search_inputs(settings: SearchSettings | None, evaluation: EvaluationOptions | None,
                  pruning: PruningSetup | None, groups: Mapping[str, Sequence[str]] | None,
                  keywords: Mapping[str, Any]) -> tuple[SearchSettings, EvaluationOptions, PruningSetup]:
    """The three settings objects of a search from the objects given and the old keyword form (a keyword of an
    object passed whole is refused: one of them would be silently ignored)."""
    unknown = sorted(set(keywords) - set(SETTINGS_KEYWORDS) - set(SETUP_KEYWORDS) - set(EVALUATION_KEYWORDS))
    if unknown:
        raise TypeError(f"search_effective_size() got unexpected keyword argument(s) {unknown}.")
    for given, names, what in ((settings, SETTINGS_KEYWORDS, "settings"), (evaluation, EVALUATION_KEYWORDS,
                                                                           "evaluation"),
                               (pruning, SETUP_KEYWORDS, "pruning")):
        both = sorted(k for k in names if k in keywords)
        if given is not None and both:
            raise EffectiveSizeError(f"search_effective_size got {what}= and {both}; put them into the {what} "
                                     "object (it carries them) or drop the object.")
    if settings is None:
        values = {k: keywords[k] for k in SETTINGS_KEYWORDS if k in keywords}
        settings = SearchSettings(groups=groups, **values)
    elif not isinstance(settings, SearchSettings):
        raise EffectiveSizeError(f"settings must be a SearchSettings, got {type(settings).__name__}")
    elif groups is not None:
        settings = replace(settings, groups=groups)
    if evaluation is None:
        evaluation = EvaluationOptions(**{field: keywords[k] for k, field in EVALUATION_KEYWORDS.items()
                                          if k in keywords})
    if pruning is None:
        pruning = PruningSetup(**{field: keywords[k] for k, field in SETUP_KEYWORDS.items() if k in keywords})
    return settings, evaluation, pruning


class _Search:
    """One search on a wrapped model, in phases: means, the full model's accuracy, masks, evaluation, result."""

    def __init__(self, prunable: PrunableModel, train_dataset: Any, eval_sets: Mapping[str, Any],
                 settings: SearchSettings, evaluation: EvaluationOptions, pruning: PruningSetup) -> None:
        self.prunable, self.train_dataset, self.eval_sets = prunable, train_dataset, eval_sets
        self.settings, self.evaluation, self.show_progress = settings, evaluation, pruning.show_progress
        device = next(prunable.model.parameters()).device
        self.overrides = {"use_cpu": device.type == "cpu", **pruning.overrides}
        self.means_examples = pruning.means_examples

    def run(self, output_dir: str | os.PathLike | None, started: float,
            known: dict[int, dict[float, dict[str, torch.Tensor]]] | None) -> EffectiveSizeSearch:
        prunable, settings = self.prunable, self.settings
        masks = None if known is None else validated_known_masks(prunable, known)   # before the means: fail fast
        self.collect_means()
        full_cache: dict[str, list[torch.Tensor]] = {}
        full = self.full_accuracy(full_cache)
        runs: list[dict[str, Any]] = []
        converged: dict[int, dict[float, bool | None]] = {}
        if masks is None:
            collator = self.evaluation.collate_fn or PadCollator(getattr(prunable.config, "pad_token_id", None) or 0)
            masks, runs, converged = _learn_masks(prunable, self.train_dataset, collator, self.overrides, settings)
        judged = evaluate_levels(prunable, self.eval_sets, masks, list(settings.sparsities), settings.groups, full,
                                 settings.margin, settings.early_stopping, full_cache,
                                 **self.evaluation.evaluate_kwargs())
        if output_dir is not None:
            self.save(masks, output_dir)
        return _result(settings, full, judged, masks, runs, converged, time.perf_counter() - started)

    def collect_means(self) -> None:
        if self.prunable.pruning_config.ablation != "mean":
            return
        data = self.train_dataset
        if self.means_examples is not None and hasattr(data, "select") and len(data) > self.means_examples:
            data = data.select(range(self.means_examples))
        # with keep_dropout the masks train with dropout on, so the MLP means must be taken the same way (as
        # prune_many and `prune` do); otherwise the ablated value differs from the one training saw
        self.prunable.compute_means(data, batch_size=self.evaluation.batch_size, collate_fn=self.evaluation.collate_fn,
                                    show_progress=self.show_progress,
                                    keep_dropout=bool(self.overrides.get("keep_dropout", False)))

    def full_accuracy(self, full_cache: dict[str, list[torch.Tensor]]) -> dict[str, float]:
        full = full_model_accuracy(self.prunable, self.eval_sets, full_model_cache=full_cache,
                                   **self.evaluation.evaluate_kwargs())
        unlabeled = [name for name in self.eval_sets if name not in full]
        if unlabeled:
            raise EffectiveSizeError(f"evaluation set(s) {unlabeled} have no 'labels'/'label' column; effective "
                                     "size compares accuracies, so every evaluation set needs labels.")
        return full

    def save(self, masks: dict[int, dict[float, dict[str, torch.Tensor]]], output_dir: str | os.PathLike) -> None:
        for seed in self.settings.seeds:
            for level in self.settings.sparsities:
                save_level(self.prunable, masks[seed][level], os.path.join(os.fspath(output_dir), f"seed-{seed}",
                                                                         f"sparsity-{level_key(level)}"))


def _result(settings: SearchSettings, full: dict[str, float], judged: Any,
            masks: dict[int, dict[float, dict[str, torch.Tensor]]], runs: list[dict[str, Any]],
            converged: dict[int, dict[float, bool | None]], seconds: float) -> EffectiveSizeSearch:
    sizes, spread = judged.summary()
    return EffectiveSizeSearch(
        strategy=settings.strategy, sparsities=list(settings.sparsities), seeds=list(settings.seeds),
        groups=settings.groups, margin=settings.margin,
        full_accuracy=full, pruned_accuracy=judged.pruned_accuracy, evaluations=judged.evaluations,
        effective_size=sizes, effective_size_per_seed=judged.per_seed, effective_size_std=spread,
        cost_steps=sum(r["steps"] for r in runs),
        masks={seed: {s: {k: v.tolist() for k, v in m.items()} for s, m in table.items()}
               for seed, table in masks.items()},
        runs=runs, wall_seconds=seconds, early_stopping=settings.early_stopping,
        evaluated=judged.evaluated, converged=converged, evaluation_seconds=judged.seconds)


def _learn_masks(prunable: PrunableModel, train_dataset: Any, collator: Callable, overrides: Mapping[str, Any],
                 settings: SearchSettings
                 ) -> tuple[dict[int, dict[float, dict[str, torch.Tensor]]], list[dict[str, Any]],
                            dict[int, dict[float, bool | None]]]:
    """Binarized masks per seed and level, one info record per pruning run, and per seed and level whether the run
    that produced the masks converged (levels that prune no unit cost nothing and have no verdict)."""
    strategy = get_strategy(settings.strategy)
    units = prunable.num_units()
    levels = list(settings.sparsities)
    masks: dict[int, dict[float, dict[str, torch.Tensor]]] = {}
    converged: dict[int, dict[float, bool | None]] = {}
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hhc-search-") as scratch:
        runner = PruningRunner(prunable, train_dataset, collator, overrides, scratch)
        for seed in settings.seeds:
            trivial = {s: all_kept(prunable) for s in levels if round(s * units) == 0}
            to_learn = [s for s in levels if s not in trivial]
            learned, seed_runs = strategy.learn(runner, to_learn, seed, settings) if to_learn else ({}, [])
            runs.extend(seed_runs)
            converged[seed] = dict.fromkeys(levels)
            for run in seed_runs:
                verdict = (run.get("convergence") or {}).get("converged")
                for level in ([run["sparsity"]] if "sparsity" in run else to_learn):
                    converged[seed][level] = verdict
            logger.info("%s: seed %d, %d levels learned in %d pruning steps", settings.strategy, seed, len(to_learn),
                        sum(r["steps"] for r in seed_runs))
            masks[seed] = {s: (trivial[s] if s in trivial else learned[s]) for s in levels}
    return masks, runs, converged
