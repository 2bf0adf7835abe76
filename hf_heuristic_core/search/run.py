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
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
from torch import nn

from ..batching import PadCollator
from ..config import PruningConfig
from ..evaluation.effective_size import EffectiveSizeError
from ..evaluation.subnetwork import full_model_accuracy
from ..model import PrunableModel
from ..training.recipes import RECIPES
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
    "LevelClimb",
    "SearchSettings",
    "check_groups",
    "check_seeds",
    "check_sparsities",
    "search_effective_size",
    "search_pruning_arguments",
]

# The built-in strategies (kept for callers of the 0.1 names; the registry `strategies.STRATEGIES` is the source).
SEARCH_STRATEGIES = tuple(STRATEGIES)
DEFAULT_STEPS = {name: s.default_steps for name, s in STRATEGIES.items() if s.default_steps is not None}
_ClimbingTrainer = ClimbingTrainer   # old private name
_key = level_key


def search_effective_size(model_or_path: nn.Module | str | os.PathLike, train_dataset: Any,
                          eval_sets: Mapping[str, Any], groups: Mapping[str, Sequence[str]] | None = None, *,
                          strategy: str = DEFAULT_STRATEGY, sparsities: Iterable[float] = DEFAULT_SPARSITIES,
                          seeds: Iterable[int] = (0,), steps_per_run: int | None = None,
                          climb: ClimbSchedule | None = None, pruning_config: PruningConfig | None = None,
                          pruning_overrides: Mapping[str, Any] | None = None, collate_fn: Callable | None = None,
                          output_dir: str | os.PathLike | None = None, margin: float = 0.03,
                          means_examples: int = 512, eval_batch_size: int = 32,
                          collapse_to_entailment: bool | Iterable[str] | str = "auto", entailment_id: int = 0,
                          model_class: Any = None, show_progress: bool = False,
                          masks: Mapping[Any, Mapping[Any, Mapping[str, Any]]] | None = None,
                          early_stopping: bool = True, settings: SearchSettings | None = None
                          ) -> EffectiveSizeSearch:
    """Effective size of one model (checkpoint) per group of evaluation sets.

    `model_or_path`: a loaded Transformers model (wrapped for the search and unwrapped afterwards) or a folder / Hub
    id. `train_dataset`: tokenized training data (the means and the pruning KL come from it). `eval_sets`:
    ``{case: tokenized labelled data}``; `groups`: ``{group: [case, ...]}`` (default: one group of every case).
    `strategy`: "nested" (default), "climb" or "grid" (see `search.strategies`); `steps_per_run` is the length of
    each grid run (default 200) or of the nested run (default 100), `climb` the climb's schedule. `settings` (a
    `SearchSettings`) replaces strategy, sparsities, seeds, groups, margin, steps_per_run, climb and early_stopping
    at once. `pruning_config` defaults to the short recipe's; `pruning_overrides` are `PruningArguments` fields (e.g.
    ``{"per_device_train_batch_size": 32}``). With `output_dir`, every level's masks are saved there as an artifact
    (``seed-0/sparsity-0.3``).

    `early_stopping` (default True) evaluates each group's levels sparsest first and stops at the first faithful one:
    the same effective sizes as evaluating everything, and the result records which (level, set) pairs ran
    (``evaluated``). Every level's masks are still learned and returned.

    `masks` (``{seed: {sparsity: {kind: mask}}}`` with the kinds `get_masks()` returns, e.g. ``"heads"`` and
    ``"mlps"`` for unit masks; a results entry's ``masks``) re-scores
    subnetworks found earlier instead of pruning: their seeds and sparsities replace `seeds` and `sparsities`, the
    cost is 0 pruning steps, and only the evaluation (with this call's `eval_sets`, `groups` and `margin`) runs.
    """
    if not isinstance(eval_sets, Mapping):
        raise EffectiveSizeError(f"eval_sets must map a case name to labelled data, got {type(eval_sets).__name__}")
    if isinstance(model_or_path, PrunableModel):
        raise TypeError("search_effective_size wraps the model itself; pass the plain Transformers model "
                        "(prunable.model) or a checkpoint folder.")
    if settings is None:
        settings = SearchSettings(strategy=strategy, sparsities=sparsities, seeds=seeds, groups=groups, margin=margin,
                                  steps_per_run=steps_per_run, climb=climb or ClimbSchedule(),
                                  early_stopping=early_stopping)
    elif not isinstance(settings, SearchSettings):
        raise EffectiveSizeError(f"settings must be a SearchSettings, got {type(settings).__name__}")
    known = None
    if masks is not None:
        known = check_known_masks(masks)
        settings = SearchSettings(**{**vars(settings), "seeds": list(known),
                                     "sparsities": list(next(iter(known.values())))})
    settings = settings.resolve(eval_sets)
    if train_dataset is None or (hasattr(train_dataset, "__len__") and len(train_dataset) == 0):
        raise EffectiveSizeError("train_dataset is empty; the means and the pruning objective need training data.")
    started = time.perf_counter()

    if isinstance(model_or_path, (str, os.PathLike)):
        from ..artifacts import load_base_model
        model = load_base_model(model_or_path, model_class)
    else:
        model = model_or_path
    modes = [m.training for m in model.modules()]
    prunable = PrunableModel(model, pruning_config or PruningConfig(**RECIPES["short"].config))
    try:
        return _search(prunable, train_dataset, eval_sets, settings, pruning_overrides, collate_fn, output_dir,
                       means_examples, {"batch_size": eval_batch_size, "collate_fn": collate_fn,
                                        "entailment_id": entailment_id, "collapse_to_entailment": collapse_to_entailment},
                       show_progress, started, known)
    finally:
        prunable.unwrap()
        for module, mode in zip(model.modules(), modes):
            module.training = mode


def _search(prunable: PrunableModel, train_dataset: Any, eval_sets: Mapping[str, Any], settings: SearchSettings,
            overrides: Mapping[str, Any] | None, collate_fn: Callable | None, output_dir: str | os.PathLike | None,
            means_examples: int, eval_kwargs: dict[str, Any], show_progress: bool, started: float,
            known: dict[int, dict[float, dict[str, torch.Tensor]]] | None = None) -> EffectiveSizeSearch:
    masks = None if known is None else validated_known_masks(prunable, known)   # before the means: fail fast
    collator = collate_fn or PadCollator(getattr(prunable.config, "pad_token_id", None) or 0)
    device = next(prunable.model.parameters()).device
    overrides = {"use_cpu": device.type == "cpu", **(overrides or {})}
    if prunable.pruning_config.ablation == "mean":
        means_data = train_dataset
        if hasattr(train_dataset, "select") and len(train_dataset) > means_examples:
            means_data = train_dataset.select(range(means_examples))
        # with keep_dropout the masks train with dropout on, so the MLP means must be taken the same way (as
        # prune_many and `prune` do); otherwise the ablated value differs from the one training saw
        prunable.compute_means(means_data, batch_size=eval_kwargs["batch_size"], collate_fn=collate_fn,
                               show_progress=show_progress, keep_dropout=bool(overrides.get("keep_dropout", False)))
    full_cache: dict[str, list[torch.Tensor]] = {}
    full = full_model_accuracy(prunable, eval_sets, full_model_cache=full_cache, **eval_kwargs)
    unlabeled = [name for name in eval_sets if name not in full]
    if unlabeled:
        raise EffectiveSizeError(f"evaluation set(s) {unlabeled} have no 'labels'/'label' column; effective size "
                                 "compares accuracies, so every evaluation set needs labels.")

    runs: list[dict[str, Any]] = []
    converged: dict[int, dict[float, bool | None]] = {}
    if masks is None:
        masks, runs, converged = _learn_masks(prunable, train_dataset, collator, overrides, settings)
    levels, seeds = list(settings.sparsities), list(settings.seeds)
    judged = evaluate_levels(prunable, eval_sets, masks, levels, settings.groups, full, settings.margin,
                             settings.early_stopping, full_cache, **eval_kwargs)
    if output_dir is not None:
        for seed in seeds:
            for level in levels:
                save_level(prunable, masks[seed][level], os.path.join(os.fspath(output_dir), f"seed-{seed}",
                                                                    f"sparsity-{level_key(level)}"))
    sizes, spread = judged.summary()
    return EffectiveSizeSearch(
        strategy=settings.strategy, sparsities=levels, seeds=seeds, groups=settings.groups, margin=settings.margin,
        full_accuracy=full, pruned_accuracy=judged.pruned_accuracy, evaluations=judged.evaluations,
        effective_size=sizes, effective_size_per_seed=judged.per_seed, effective_size_std=spread,
        cost_steps=sum(r["steps"] for r in runs),
        masks={seed: {s: {k: v.tolist() for k, v in m.items()} for s, m in table.items()}
               for seed, table in masks.items()},
        runs=runs, wall_seconds=time.perf_counter() - started, early_stopping=settings.early_stopping,
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
