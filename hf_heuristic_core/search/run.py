"""Effective size of one checkpoint: prune at several sparsities, evaluate every subnetwork, apply the definition.

Three strategies find the subnetworks:

* ``grid`` (the paper): one independent `PruningTrainer` run per (sparsity, seed), each from fresh mask logits.
  Cost: ``len(sparsities) * len(seeds) * steps_per_run`` pruning steps (default 200 per run).
* ``climb``: one run per seed whose target sparsity climbs through the levels. Each level is reached by a short ramp,
  held until the learned (expected) sparsity has reached it and stayed ``settle_steps`` more steps, and then the
  binarized masks are snapshotted at exactly that level (``get_masks(binary=True, sparsity=level)``: exactly
  ``round(level * N)`` units pruned). Later levels start from the masks learned for the earlier ones.
* ``nested``: one run per seed to the highest level (the target rises over 70% of ``steps_per_run``, default 100,
  then holds), and every level's masks are the top-k of that run's final mask logits: nested subnetworks, each
  pruning exactly its share of units. Cheapest, and the low levels get the ranking of the whole run rather than an
  early snapshot. The default: `BENCHMARKS.md` measures it against the grid over a real fine-tuning run.

All three evaluate every subnetwork with `evaluate_subnetwork` on the same data (full-model logits computed once)
and report their cost in pruning steps. Means for mean ablation come from the training data at this checkpoint.
"""

from __future__ import annotations

import logging
import math
import numbers
import os
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
from torch import nn
from transformers import PrinterCallback, ProgressCallback, TrainerCallback

from ..training.arguments import PruningArguments
from ..config import PruningConfig
from ..evaluation.effective_size import EffectiveSizeError, effective_size_per_seed
from ..errors import MaskShapeError
from ..evaluation.subnetwork import evaluate_subnetwork, full_model_accuracy
from ..batching import PadCollator
from ..model import PrunableModel
from ..training.recipes import RECIPES
from ..training.trainer import PruningTrainer
from .defaults import DEFAULT_SPARSITIES, DEFAULT_STEPS, DEFAULT_STRATEGY, SEARCH_STRATEGIES

logger = logging.getLogger(__name__)

__all__ = ["ClimbSchedule", "DEFAULT_SPARSITIES", "DEFAULT_STEPS", "DEFAULT_STRATEGY", "EffectiveSizeSearch", "LevelClimb",
           "SEARCH_STRATEGIES", "check_groups", "check_seeds", "check_sparsities", "search_effective_size",
           "search_pruning_arguments"]


# Short-run settings measured to work on CPU budgets (see README, "Short runs"); the paper's defaults
# (log_alpha init 10, multiplier lr 1.0, sampled penalty) need thousands of steps to move the masks at all.
SHORT_RUN_ARGUMENTS = {**RECIPES["short"].arguments, "per_device_train_batch_size": 16, "report_to": "none",
                       "save_strategy": "no", "logging_strategy": "no", "disable_tqdm": True}
# Single-run strategies: constant learning rate from the first step (their length is short or not known in advance).
CHEAP_RUN_ARGUMENTS = {"lr_scheduler_type": "constant_with_warmup", "warmup_steps": 0}


# ---------------------------------------------------------------------------------------------------------- inputs
def check_sparsities(sparsities: Iterable[float]) -> list[float]:
    """Sorted, de-duplicated fractions in [0, 1); anything else is a clear error (50 is not 0.5)."""
    if isinstance(sparsities, (str, bytes)) or not isinstance(sparsities, Iterable):
        raise EffectiveSizeError(f"sparsities must be a list of fractions, e.g. [0.1, 0.2, 0.3], got {sparsities!r}")
    values = []
    for value in sparsities:
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
                or not 0.0 <= float(value) < 1.0:
            hint = " (pass fractions, e.g. 0.5 for 50%)" if isinstance(value, numbers.Real) and value >= 1 else ""
            raise EffectiveSizeError(f"sparsity {value!r} is outside [0, 1){hint}; every level is the fraction of "
                                     "heads and MLP blocks pruned.")
        values.append(float(value))
    if not values:
        raise EffectiveSizeError("sparsities is empty; pass at least one level, e.g. [0.1, 0.2, ..., 0.7].")
    if len(set(values)) != len(values):
        raise EffectiveSizeError(f"sparsities lists a level twice: {values}; list each level once.")
    return sorted(values)


def check_seeds(seeds: Iterable[int]) -> list[int]:
    values = list(seeds) if isinstance(seeds, Iterable) and not isinstance(seeds, (str, bytes)) else None
    if not values or any(isinstance(s, bool) or not isinstance(s, numbers.Integral) for s in values):
        raise EffectiveSizeError(f"seeds must be a non-empty list of integers, e.g. [0, 1, 2], got {seeds!r}")
    if len(set(values)) != len(values):
        raise EffectiveSizeError(f"seeds lists a seed twice: {values}")
    return [int(s) for s in values]


def check_groups(groups: Mapping[str, Sequence[str]] | None, cases: Iterable[str]) -> dict[str, list[str]]:
    """Groups map a name (ID / OOD / mixed) to evaluation-set names; default: one group ``all`` of every set."""
    available = list(cases)
    if not available:
        raise EffectiveSizeError("eval_sets is empty; pass at least one labelled evaluation set, e.g. {'id': data}.")
    if groups is None:
        return {"all": available}
    if not isinstance(groups, Mapping) or not groups:
        raise EffectiveSizeError(f"groups must be a non-empty mapping of group name -> evaluation-set names, e.g. "
                                 f"{{'ID': ['id_eval'], 'OOD': [...]}}, got {groups!r}")
    resolved: dict[str, list[str]] = {}
    for name, members in groups.items():
        if isinstance(members, (str, bytes)) or not isinstance(members, Iterable):
            raise EffectiveSizeError(f"group {name!r} must list evaluation-set names, not {members!r}; "
                                     f"wrap a single name: [{members!r}]")
        members = list(members)
        if not members:
            raise EffectiveSizeError(f"group {name!r} is empty; list at least one evaluation set of {available}.")
        if len(set(members)) != len(members):
            raise EffectiveSizeError(f"group {name!r} lists an evaluation set twice: {members}")
        unknown = [m for m in members if m not in available]
        if unknown:
            raise EffectiveSizeError(f"group {name!r} names {unknown}, which are not evaluation sets; the evaluation "
                                     f"sets are {available}.")
        resolved[str(name)] = members
    return resolved


def search_pruning_arguments(output_dir: str, target_sparsity: float, max_steps: int, seed: int,
                             overrides: Mapping[str, Any] | None = None, **fixed: Any) -> PruningArguments:
    """`PruningArguments` for one search run: short-run defaults < strategy settings < the caller's overrides."""
    values: dict[str, Any] = {**SHORT_RUN_ARGUMENTS, **fixed, "output_dir": output_dir,
                              "target_sparsity": target_sparsity, "max_steps": max_steps, "seed": seed}
    values.update(overrides or {})
    return PruningArguments(**values)


# ---------------------------------------------------------------------------------------------------------- climb
@dataclass
class ClimbSchedule:
    """How the climbing run moves from one level to the next.

    The target ramps linearly from the previous level to the next over ``ramp_steps`` (the first level, from 0, over
    ``first_ramp_steps``, default ``ramp_steps``), then holds. A level counts as reached once the expected sparsity
    is within ``tolerance_units`` units of it (or beyond it, in the direction of travel); the masks are snapshotted
    ``settle_steps`` steps later. A level not reached within ``max_wait_steps`` of holding is left behind (flagged
    ``reached: False``); its masks are then the top-k of the run's final logits (as in ``nested``) rather than an
    early, barely trained snapshot. ``order="descending"`` prunes to the highest level first and then lets units back
    in level by level.
    """

    ramp_steps: int = 8
    settle_steps: int = 4
    max_wait_steps: int = 12
    tolerance_units: float = 0.5
    first_ramp_steps: int | None = None
    order: str = "ascending"

    def __post_init__(self) -> None:
        for name in ("ramp_steps", "settle_steps", "max_wait_steps", "first_ramp_steps"):
            value = getattr(self, name)
            if value is None and name == "first_ramp_steps":
                continue
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
                raise ValueError(f"ClimbSchedule.{name} must be an integer >= 0, got {value!r}")
        if not self.tolerance_units >= 0:
            raise ValueError(f"ClimbSchedule.tolerance_units must be >= 0, got {self.tolerance_units!r}")
        if self.order not in ("ascending", "descending"):
            raise ValueError(f"ClimbSchedule.order must be 'ascending' or 'descending', got {self.order!r}")

    def ramp(self, index: int) -> int:
        return self.first_ramp_steps if index == 0 and self.first_ramp_steps is not None else self.ramp_steps

    def max_steps(self, num_levels: int) -> int:
        extra = self.max_wait_steps + self.settle_steps + 1
        return sum(self.ramp(i) + extra for i in range(num_levels))


class LevelClimb(TrainerCallback):
    """Target schedule and snapshot taker of one climbing run (read by `_ClimbingTrainer.current_target`)."""

    def __init__(self, levels: Sequence[float], num_units: int, schedule: ClimbSchedule) -> None:
        self.levels = sorted(levels, reverse=schedule.order == "descending")
        self.num_units = num_units
        self.schedule = schedule
        self.index = 0
        self.phase_start = 0
        self.reached_at: int | None = None
        self.snapshots: dict[float, dict[str, torch.Tensor]] = {}
        self.events: list[dict[str, Any]] = []

    @property
    def done(self) -> bool:
        return self.index >= len(self.levels)

    def max_steps(self) -> int:
        return self.schedule.max_steps(len(self.levels))

    def _previous(self) -> float:
        return self.levels[self.index - 1] if self.index else 0.0

    def target(self, step: int) -> float:
        if self.done:
            return self.levels[-1]
        level, previous = self.levels[self.index], self._previous()
        ramp = self.schedule.ramp(self.index)
        progress = 1.0 if ramp <= 0 else min(1.0, (step - self.phase_start) / ramp)
        return previous + (level - previous) * progress

    def _reached(self, expected_pruned: float, level: float) -> bool:
        wanted = round(level * self.num_units)
        tolerance = self.schedule.tolerance_units
        if level >= self._previous():
            return expected_pruned >= wanted - tolerance
        return expected_pruned <= wanted + tolerance

    def on_step_end(self, args, state, control, model=None, **kwargs):
        if self.done or model is None:
            return control
        step, level = state.global_step, self.levels[self.index]
        ramp = self.schedule.ramp(self.index)
        held = step - self.phase_start >= ramp
        with torch.no_grad():
            expected_pruned = float(model.expected_sparsity()) * self.num_units
        if held and self.reached_at is None and self._reached(expected_pruned, level):
            self.reached_at = step
        settled = self.reached_at is not None and step - self.reached_at >= self.schedule.settle_steps
        gave_up = step - self.phase_start >= ramp + self.schedule.max_wait_steps + \
            (self.schedule.settle_steps if self.reached_at is not None else 0)
        if settled or gave_up:
            self.snapshot(model, step, expected_pruned / self.num_units, reached=self.reached_at is not None)
            if self.done:
                control.should_training_stop = True
        return control

    def snapshot(self, model: PrunableModel, step: int, expected: float, reached: bool) -> None:
        level = self.levels[self.index]
        self.snapshots[level] = model.get_masks(binary=True, sparsity=level)
        self.events.append({"sparsity": level, "step": step, "expected_sparsity": expected, "reached": reached,
                            "reached_at": self.reached_at})
        if not reached:
            logger.info("climb: expected sparsity %.3f had not reached level %.3f after %d steps; snapshotting the "
                        "top-k masks anyway.", expected, level, step - self.phase_start)
        self.index += 1
        self.phase_start, self.reached_at = step, None


class _ClimbingTrainer(PruningTrainer):
    """A `PruningTrainer` whose target follows a `LevelClimb` instead of the linear warm-up schedule."""

    def __init__(self, *args: Any, climb: LevelClimb, **kwargs: Any) -> None:
        self.climb = climb
        super().__init__(*args, **kwargs)
        self.add_callback(climb)

    def current_target(self) -> float:
        return self.climb.target(self.state.global_step)


# ---------------------------------------------------------------------------------------------------------- result
def _key(sparsity: float) -> str:
    return format(sparsity, ".6g")


@dataclass
class EffectiveSizeSearch:
    """Everything one search measured. ``pruned_accuracy[seed][sparsity][case]`` feeds `effective_size`;
    ``effective_size[group]`` is the mean over seeds of ``effective_size_per_seed[group][seed]``."""

    strategy: str
    sparsities: list[float]
    seeds: list[int]
    groups: dict[str, list[str]]
    margin: float
    full_accuracy: dict[str, float]
    pruned_accuracy: dict[int, dict[float, dict[str, float]]]
    evaluations: dict[int, dict[float, dict[str, dict[str, float]]]]
    effective_size: dict[str, float]
    effective_size_per_seed: dict[str, dict[int, float]]
    effective_size_std: dict[str, float]
    cost_steps: int
    masks: dict[int, dict[float, dict[str, list]]]
    runs: list[dict[str, Any]] = field(default_factory=list)
    wall_seconds: float = 0.0

    def group_full_accuracy(self) -> dict[str, float]:
        """Unweighted mean of the full model's accuracy over each group's cases (as the definition uses it)."""
        return {g: math.fsum(self.full_accuracy[c] for c in cases) / len(cases) for g, cases in self.groups.items()}

    def records(self, step: int | None = None) -> list[dict[str, Any]]:
        """Rows for `plotting.plot_effective_size`: one per (group, seed)."""
        full = self.group_full_accuracy()
        return [{"step": step, "seed": seed, "group": group, "effective_size": size, "full_accuracy": full[group]}
                for group, per_seed in self.effective_size_per_seed.items() for seed, size in per_seed.items()]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: sparsity and seed keys become strings ("0.3", "0")."""
        data = asdict(self)
        for name in ("pruned_accuracy", "evaluations", "masks"):
            data[name] = {str(seed): {_key(s): v for s, v in table.items()} for seed, table in data[name].items()}
        data["effective_size_per_seed"] = {g: {str(seed): v for seed, v in t.items()}
                                           for g, t in data["effective_size_per_seed"].items()}
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "EffectiveSizeSearch":
        values = dict(data)
        for name in ("pruned_accuracy", "evaluations", "masks"):
            values[name] = {int(seed): {float(s): v for s, v in table.items()}
                            for seed, table in values.get(name, {}).items()}
        values["effective_size_per_seed"] = {g: {int(seed): v for seed, v in t.items()}
                                             for g, t in values["effective_size_per_seed"].items()}
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in values.items() if k in known})


# ---------------------------------------------------------------------------------------------------------- search
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
                          masks: Mapping[Any, Mapping[Any, Mapping[str, Any]]] | None = None
                          ) -> EffectiveSizeSearch:
    """Effective size of one model (checkpoint) per group of evaluation sets.

    `model_or_path`: a loaded Transformers model (wrapped for the search and unwrapped afterwards) or a folder / Hub
    id. `train_dataset`: tokenized training data (the means and the pruning KL come from it). `eval_sets`:
    ``{case: tokenized labelled data}``; `groups`: ``{group: [case, ...]}`` (default: one group of every case).
    `strategy`: "nested" (default), "climb" or "grid" (see the module docstring); `steps_per_run` is the length of each grid
    run (default 200) or of the nested run (default 100), `climb` the climb's schedule. `pruning_config` defaults
    to ``PruningConfig(init_mean=3.0)``; `pruning_overrides` are `PruningArguments` fields (e.g.
    ``{"per_device_train_batch_size": 32}``). With `output_dir`, every level's masks are saved there as an artifact
    (``seed-0/sparsity-0.3``).

    `masks` (``{seed: {sparsity: {"heads": [[...]], "mlps": [...]}}}``, e.g. a results entry's ``masks``) re-scores
    subnetworks found earlier instead of pruning: their seeds and sparsities replace `seeds` and `sparsities`, the
    cost is 0 pruning steps, and only the evaluation (with this call's `eval_sets`, `groups` and `margin`) runs. Use
    it to judge the same subnetworks on a larger or different evaluation set.
    """
    if strategy not in SEARCH_STRATEGIES:
        raise EffectiveSizeError(f"strategy must be one of {SEARCH_STRATEGIES}, got {strategy!r}")
    if not isinstance(eval_sets, Mapping):
        raise EffectiveSizeError(f"eval_sets must map a case name to labelled data, got {type(eval_sets).__name__}")
    if isinstance(model_or_path, PrunableModel):
        raise TypeError("search_effective_size wraps the model itself; pass the plain Transformers model "
                        "(prunable.model) or a checkpoint folder.")
    known = None
    if masks is not None:
        known = _check_known_masks(masks)
        seeds, sparsities = list(known), list(next(iter(known.values())))
    levels = check_sparsities(sparsities)
    seed_list = check_seeds(seeds)
    resolved_groups = check_groups(groups, eval_sets)
    if isinstance(margin, bool) or not isinstance(margin, numbers.Real) or not math.isfinite(margin) or margin < 0:
        raise EffectiveSizeError(f"margin must be a finite number >= 0 (e.g. 0.03 for 3 points), got {margin!r}")
    steps_per_run = DEFAULT_STEPS.get(strategy, 0) if steps_per_run is None else steps_per_run
    if strategy != "climb" and (isinstance(steps_per_run, bool) or not isinstance(steps_per_run, numbers.Integral)
                                or steps_per_run < 1):
        raise EffectiveSizeError(f"steps_per_run must be a positive integer, got {steps_per_run!r}")
    if train_dataset is None or (hasattr(train_dataset, "__len__") and len(train_dataset) == 0):
        raise EffectiveSizeError("train_dataset is empty; the means and the pruning objective need training data.")
    climb = climb or ClimbSchedule()
    started = time.perf_counter()

    owned = isinstance(model_or_path, (str, os.PathLike))
    if owned:
        from ..artifacts import load_base_model
        model = load_base_model(model_or_path, model_class)
    else:
        model = model_or_path
    modes = [m.training for m in model.modules()]
    config = pruning_config or PruningConfig(**RECIPES["short"].config)
    prunable = PrunableModel(model, config)
    try:
        return _search(prunable, train_dataset, eval_sets, resolved_groups, strategy, levels, seed_list,
                       steps_per_run, climb, pruning_overrides, collate_fn, output_dir, float(margin), means_examples,
                       eval_batch_size, collapse_to_entailment, entailment_id, show_progress, started, known)
    finally:
        prunable.unwrap()
        for module, mode in zip(model.modules(), modes):
            module.training = mode


def _search(prunable: PrunableModel, train_dataset: Any, eval_sets: Mapping[str, Any], groups: dict[str, list[str]],
            strategy: str, levels: list[float], seeds: list[int], steps_per_run: int, climb: ClimbSchedule,
            overrides: Mapping[str, Any] | None, collate_fn: Callable | None, output_dir: str | os.PathLike | None,
            margin: float, means_examples: int, eval_batch_size: int, collapse: Any, entailment_id: int,
            show_progress: bool, started: float,
            known: dict[int, dict[float, dict[str, torch.Tensor]]] | None = None) -> EffectiveSizeSearch:
    masks = None if known is None else _validated_known_masks(prunable, known)   # before the means: fail fast
    pad = getattr(prunable.config, "pad_token_id", None) or 0
    collator = collate_fn or PadCollator(pad)
    device = next(prunable.model.parameters()).device
    overrides = {"use_cpu": device.type == "cpu", **(overrides or {})}
    if prunable.pruning_config.ablation == "mean":
        means_data = train_dataset
        if hasattr(train_dataset, "select") and len(train_dataset) > means_examples:
            means_data = train_dataset.select(range(means_examples))
        prunable.compute_means(means_data, batch_size=eval_batch_size, collate_fn=collate_fn,
                               show_progress=show_progress)
    eval_kwargs = {"batch_size": eval_batch_size, "collate_fn": collate_fn, "entailment_id": entailment_id,
                   "collapse_to_entailment": collapse}
    full_cache: dict[str, list[torch.Tensor]] = {}
    full = full_model_accuracy(prunable, eval_sets, **eval_kwargs)
    unlabeled = [name for name in eval_sets if name not in full]
    if unlabeled:
        raise EffectiveSizeError(f"evaluation set(s) {unlabeled} have no 'labels'/'label' column; effective size "
                                 "compares accuracies, so every evaluation set needs labels.")

    runs: list[dict[str, Any]] = []
    if masks is None:
        masks, runs = _learn_masks(prunable, train_dataset, collator, overrides, strategy, levels, seeds,
                                   steps_per_run, climb)

    pruned: dict[int, dict[float, dict[str, float]]] = {}
    evaluations: dict[int, dict[float, dict[str, dict[str, float]]]] = {}
    for seed in seeds:
        pruned[seed], evaluations[seed] = {}, {}
        for level in levels:
            result = evaluate_subnetwork(prunable, eval_sets, masks[seed][level], full_model_cache=full_cache,
                                         **eval_kwargs)
            evaluations[seed][level] = result
            pruned[seed][level] = {case: entry["accuracy"] for case, entry in result.items()}
            if output_dir is not None:
                _save_level(prunable, masks[seed][level], os.path.join(os.fspath(output_dir), f"seed-{seed}",
                                                                     f"sparsity-{_key(level)}"))

    sizes: dict[str, float] = {}
    per_seed: dict[str, dict[int, float]] = {}
    spread: dict[str, float] = {}
    for group, cases in groups.items():
        summary = effective_size_per_seed(full, pruned, cases=cases, margin=margin)
        sizes[group], spread[group] = summary["mean"], summary["std"]
        per_seed[group] = {int(seed): value for seed, value in summary["per_seed"].items()}
    return EffectiveSizeSearch(
        strategy=strategy, sparsities=levels, seeds=seeds, groups=groups, margin=margin, full_accuracy=full,
        pruned_accuracy=pruned, evaluations=evaluations, effective_size=sizes, effective_size_per_seed=per_seed,
        effective_size_std=spread, cost_steps=sum(r["steps"] for r in runs),
        masks={seed: {s: {k: v.tolist() for k, v in m.items()} for s, m in table.items()}
               for seed, table in masks.items()},
        runs=runs, wall_seconds=time.perf_counter() - started)


def _learn_masks(prunable: PrunableModel, train_dataset: Any, collator: Callable, overrides: Mapping[str, Any],
                 strategy: str, levels: list[float], seeds: list[int], steps_per_run: int, climb: ClimbSchedule
                 ) -> tuple[dict[int, dict[float, dict[str, torch.Tensor]]], list[dict[str, Any]]]:
    """Binarized masks per seed and level, found with `strategy`, and one info record per pruning run."""
    units = prunable.num_units()
    masks: dict[int, dict[float, dict[str, torch.Tensor]]] = {}
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="hhc-search-") as scratch:
        runner = _Runner(prunable, train_dataset, collator, overrides, scratch)
        for seed in seeds:
            trivial = {s: _all_kept(prunable) for s in levels if round(s * units) == 0}
            to_learn = [s for s in levels if s not in trivial]
            learned: dict[float, dict[str, torch.Tensor]] = {}
            if to_learn and strategy == "grid":
                for level in to_learn:
                    learned[level], info = runner.grid_run(level, seed, steps_per_run)
                    runs.append(info)
            elif to_learn:
                run = runner.climb_run(to_learn, seed, climb) if strategy == "climb" else \
                    runner.nested_run(to_learn, seed, steps_per_run)
                learned, info = run
                runs.append(info)
            logger.info("%s: seed %d, %d levels learned in %d pruning steps", strategy, seed, len(to_learn),
                        sum(r["steps"] for r in runs if r["seed"] == seed))
            masks[seed] = {s: (trivial.get(s) if s in trivial else learned[s]) for s in levels}
    return masks, runs


def _check_known_masks(masks: Any) -> dict[int, dict[float, dict[str, torch.Tensor]]]:
    """``{seed: {sparsity: {"heads", "mlps"}}}`` with JSON's string keys accepted; every seed must list the same
    sparsities (the effective size compares levels across seeds)."""
    example = '{0: {0.3: {"heads": [[1.0, 0.0, ...], ...], "mlps": [1.0, ...]}}}'
    if not isinstance(masks, Mapping) or not masks:
        raise EffectiveSizeError(f"masks must map seed -> sparsity -> {{'heads', 'mlps'}}, e.g. {example}; "
                                 f"got {type(masks).__name__}")
    known: dict[int, dict[float, dict[str, torch.Tensor]]] = {}
    for seed, table in masks.items():
        try:
            seed_id = int(seed)
        except (TypeError, ValueError):
            raise EffectiveSizeError(f"masks: seed key {seed!r} is not an integer; the shape is {example}") from None
        if not isinstance(table, Mapping) or not table:
            raise EffectiveSizeError(f"masks[{seed!r}] must map sparsity -> masks, got {table!r:.80}")
        levels: dict[float, dict[str, torch.Tensor]] = {}
        for level, unit_masks in table.items():
            try:
                value = float(level)
            except (TypeError, ValueError):
                raise EffectiveSizeError(f"masks[{seed!r}]: sparsity key {level!r} is not a number") from None
            if not isinstance(unit_masks, Mapping) or set(unit_masks) != {"heads", "mlps"}:
                found = sorted(unit_masks) if isinstance(unit_masks, Mapping) else type(unit_masks).__name__
                raise EffectiveSizeError(f"masks[{seed!r}][{level!r}] must have exactly the keys 'heads' and "
                                         f"'mlps', got {found}")
            levels[value] = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in unit_masks.items()}
        known[seed_id] = levels
    first = sorted(next(iter(known.values())))
    for seed_id, levels in known.items():
        if sorted(levels) != first:
            raise EffectiveSizeError(f"masks: seed {seed_id} has sparsities {sorted(levels)} but the first seed has "
                                     f"{first}; every seed needs the same levels.")
    return known


def _validated_known_masks(prunable: PrunableModel,
                           known: Mapping[int, Mapping[float, Mapping[str, torch.Tensor]]]
                           ) -> dict[int, dict[float, dict[str, torch.Tensor]]]:
    """Each given mask through the model's own check (shape, finiteness and [0, 1] range), with the seed and level
    that failed named in the error."""
    validated: dict[int, dict[float, dict[str, torch.Tensor]]] = {}
    for seed, levels in known.items():
        validated[seed] = {}
        for level, unit_masks in levels.items():
            try:
                validated[seed][level] = prunable.validate_masks(unit_masks)
            except MaskShapeError as err:
                raise EffectiveSizeError(f"masks[{seed}][{level:g}] cannot be used on this model: {err} Masks from "
                                         "another architecture, or with values outside [0, 1], do not apply.") from err
    return validated


def _all_kept(prunable: PrunableModel) -> dict[str, torch.Tensor]:
    return {"heads": torch.ones(prunable.num_layers, prunable.num_heads), "mlps": torch.ones(prunable.num_layers)}


def _save_level(prunable: PrunableModel, masks: Mapping[str, torch.Tensor], folder: str) -> None:
    with prunable.masks_applied(masks):
        prunable.save_pretrained(folder)


class _Runner:
    """Runs pruning on one wrapped model, resetting its masks between runs and sharing the teacher cache."""

    def __init__(self, prunable: PrunableModel, train_dataset: Any, collator: Callable,
                 overrides: Mapping[str, Any], scratch: str) -> None:
        self.prunable, self.train_dataset, self.collator = prunable, train_dataset, collator
        self.overrides, self.scratch = dict(overrides), scratch
        self.teacher_cache = None
        self.count = 0

    def _train(self, trainer: PruningTrainer) -> int:
        for quiet in (PrinterCallback, ProgressCallback):
            trainer.remove_callback(quiet)
        trainer.train()
        if trainer.args.teacher == "cached" and self.teacher_cache is None:
            self.teacher_cache = trainer.teacher_cache
        return int(trainer.state.global_step)

    def _folder(self) -> str:
        self.count += 1
        return os.path.join(self.scratch, f"run-{self.count}")

    def grid_run(self, level: float, seed: int, steps: int) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        self.prunable.reset_masks(seed)
        fixed = {"sparsity_warmup_steps": max(1, steps // 2)}
        args = search_pruning_arguments(self._folder(), level, steps, seed, self.overrides, **fixed)
        trainer = PruningTrainer(model=self.prunable, args=args, train_dataset=self.train_dataset,
                                 data_collator=self.collator, teacher_cache=self.teacher_cache)
        taken = self._train(trainer)
        masks = self.prunable.get_masks(binary=True)   # the trainer's final (fixed) masks
        self.prunable.clear_masks()
        return masks, {"strategy": "grid", "seed": seed, "sparsity": level, "steps": taken}

    def nested_run(self, levels: list[float], seed: int, steps: int
                   ) -> tuple[dict[float, dict[str, torch.Tensor]], dict[str, Any]]:
        """One run to the highest level; every level is the top-k of its final logits."""
        self.prunable.reset_masks(seed)
        fixed = {"sparsity_warmup_steps": max(1, round(0.7 * steps)), **CHEAP_RUN_ARGUMENTS}
        args = search_pruning_arguments(self._folder(), levels[-1], steps, seed, self.overrides, **fixed)
        trainer = PruningTrainer(model=self.prunable, args=args, train_dataset=self.train_dataset,
                                 data_collator=self.collator, teacher_cache=self.teacher_cache)
        taken = self._train(trainer)
        self.prunable.clear_masks()
        masks = {level: self.prunable.get_masks(binary=True, sparsity=level) for level in levels}
        with torch.no_grad():
            expected = float(self.prunable.expected_sparsity())
        return masks, {"strategy": "nested", "seed": seed, "steps": taken, "expected_sparsity": expected}

    def climb_run(self, levels: list[float], seed: int, schedule: ClimbSchedule
                  ) -> tuple[dict[float, dict[str, torch.Tensor]], dict[str, Any]]:
        self.prunable.reset_masks(seed)
        climb = LevelClimb(levels, self.prunable.num_units(), schedule)
        args = search_pruning_arguments(self._folder(), max(levels), climb.max_steps(), seed, self.overrides,
                                        **CHEAP_RUN_ARGUMENTS)
        trainer = _ClimbingTrainer(model=self.prunable, args=args, train_dataset=self.train_dataset,
                                   data_collator=self.collator, teacher_cache=self.teacher_cache, climb=climb)
        taken = self._train(trainer)
        while not climb.done:   # the step budget ran out (only with overridden max_steps)
            with torch.no_grad():
                expected = float(self.prunable.expected_sparsity())
            climb.snapshot(self.prunable, taken, expected, reached=False)
        self.prunable.clear_masks()
        masks = dict(climb.snapshots)
        # A level the learned sparsity never reached has no meaningful snapshot (early on, the ranking is mostly the
        # initial noise): take it from the end of the run instead, whose ranking had every step to form.
        for event in climb.events:
            event["masks_from"] = "snapshot" if event["reached"] else "final"
            if not event["reached"]:
                masks[event["sparsity"]] = self.prunable.get_masks(binary=True, sparsity=event["sparsity"])
        missed = [e["sparsity"] for e in climb.events if not e["reached"]]
        if missed:
            logger.info("climb (seed %d): levels %s were not reached in time; their masks are the top-k of the final "
                        "logits.", seed, missed)
        return masks, {"strategy": "climb", "seed": seed, "steps": taken, "levels": climb.events}
