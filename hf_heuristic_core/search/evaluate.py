"""Judging the subnetworks a search found: exact early stopping over the levels, per seed and group.

The effective size is ``1 - (the largest faithful sparsity)``, so each group (ID, OOD, mixed) needs its levels only
from the sparsest down to its first faithful one, and a level only until the sets still missing cannot change its
verdict (`effective_sizes_by_scan`; smallest sets first). A (level, evaluation set) accuracy is
computed at most once per seed and shared by every group that contains the set; the full model's logits are computed
once per checkpoint (`full_model_cache`) and reused by every subnetwork. `early_stopping=False` evaluates every
level on every set first, then scores the same way: the reference the early-stopped answer must equal.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch

from ..evaluation.effective_size import effective_sizes_by_scan
from ..evaluation.subnetwork import evaluate_subnetwork
from ..model import PrunableModel

__all__ = ["LevelEvaluation", "evaluate_levels"]


@dataclass
class LevelEvaluation:
    """What `evaluate_levels` measured: accuracies and full metrics of the evaluated (level, set) pairs, which
    pairs those were, and each group's effective size per seed."""

    pruned_accuracy: dict[int, dict[float, dict[str, float]]] = field(default_factory=dict)
    evaluations: dict[int, dict[float, dict[str, dict[str, float]]]] = field(default_factory=dict)
    evaluated: dict[int, dict[float, list[str]]] = field(default_factory=dict)
    per_seed: dict[str, dict[int, float]] = field(default_factory=dict)
    seconds: float = 0.0

    def summary(self) -> tuple[dict[str, float], dict[str, float]]:
        """Mean and population std over seeds per group (the released code's order: per seed, then average)."""
        return ({g: statistics.fmean(t.values()) for g, t in self.per_seed.items()},
                {g: statistics.pstdev(t.values()) for g, t in self.per_seed.items()})


def evaluate_levels(prunable: PrunableModel, eval_sets: Mapping[str, Any],
                    masks: Mapping[int, Mapping[float, Mapping[str, torch.Tensor]]], levels: list[float],
                    groups: Mapping[str, list[str]], full_accuracy: Mapping[str, float], margin: float,
                    early_stopping: bool, full_model_cache: dict, **eval_kwargs: Any) -> LevelEvaluation:
    """Effective size per group and seed of the subnetworks `masks[seed][level]`."""
    started = time.perf_counter()
    result = LevelEvaluation(per_seed={group: {} for group in groups})
    # cheapest sets first: a level is often decided before its largest set is needed
    costs = {name: float(len(data)) if hasattr(data, "__len__") else 0.0 for name, data in eval_sets.items()}
    for seed, by_level in masks.items():
        evaluations: dict[float, dict[str, dict[str, float]]] = {}

        def evaluate(level: float, cases: list[str], by_level: Mapping = by_level,
                     evaluations: dict = evaluations) -> dict[str, float]:
            found = evaluate_subnetwork(prunable, {c: eval_sets[c] for c in cases}, by_level[level],
                                        full_model_cache=full_model_cache, **eval_kwargs)
            evaluations.setdefault(level, {}).update(found)
            return {case: entry["accuracy"] for case, entry in found.items()}

        table: dict[float, dict[str, float]] = {}
        if not early_stopping:
            for level in levels:
                table[level] = evaluate(level, list(eval_sets))
        sizes, table = effective_sizes_by_scan(full_accuracy, levels, groups, evaluate, margin=margin, table=table,
                                               costs=costs)
        for group, size in sizes.items():
            result.per_seed[group][seed] = size
        ordered = sorted(table)
        result.pruned_accuracy[seed] = {level: dict(table[level]) for level in ordered if table[level]}
        result.evaluations[seed] = {level: evaluations[level] for level in ordered if level in evaluations}
        result.evaluated[seed] = {level: sorted(table[level]) for level in ordered if table[level]}
    result.seconds = time.perf_counter() - started
    return result
