"""Ablation tables on the full model (the paper's Table 3).

`ablation_table` ablates units of the *full* model one at a time and jointly, next to the average over non-core
units, so that "removing these three heads together costs far more than the three drops added up" can be read off.
Units are written as in `units.py`: `(layer, head)` / "L4.H0" for heads, `("mlp", layer)` / "L3.MLP" for MLP blocks.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from tqdm.auto import tqdm

from ..evaluation.options import EvaluationOptions
from ..evaluation.subnetwork import evaluate_subnetwork
from ..model import PrunableModel
from .units import HEAD_KIND, Unit, all_units, group_label, masks_without, parse_unit, unit_label

__all__ = ["ABLATION_KEYWORDS", "AblationOptions", "AblationRow", "AblationTable", "ablation_inputs",
           "ablation_table"]


@dataclass
class AblationRow:
    """One ablation: which units, the accuracy per set and its change from the full model."""

    label: str
    units: list[Unit]
    kind: str  # "single", "joint" or "non_core_average"
    accuracy: dict[str, float]
    delta: dict[str, float]
    sum_of_singles: dict[str, float] | None = None
    super_additive: dict[str, bool] | None = None
    std: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["units"] = [unit_label(u) for u in self.units]
        return out


@dataclass
class AblationTable:
    """The paper's Table 3: full model, single-unit ablations, joint ablations, average non-core head."""

    mode: str
    full_accuracy: dict[str, float]
    rows: list[AblationRow]
    non_core: list[AblationRow] = field(default_factory=list)

    def plot_table(self, include_sums: bool = True) -> dict[str, dict[str, float]]:
        """`{row_label: {case: delta}}` for `plotting.plot_ablation_table` (joint rows followed by the sum of
        their units' single deltas, so super-additivity is visible)."""
        table: dict[str, dict[str, float]] = {}
        for row in self.rows:
            table[row.label] = dict(row.delta)
            if include_sums and row.kind == "joint" and row.sum_of_singles is not None:
                table[f"sum of singles ({row.label})"] = dict(row.sum_of_singles)
        return table

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "full_accuracy": self.full_accuracy, "rows": [r.to_dict() for r in self.rows],
                "non_core": [r.to_dict() for r in self.non_core]}


@dataclass
class AblationOptions:
    """What `ablation_table` ablates and how (see its docstring): `core` (default: the units), `joint` groups,
    `non_core_sample` units of `non_core_kinds` drawn with `seed`, the ablation `mode`, and a progress bar."""

    core: Sequence[Any] | None = None
    joint: Sequence[Sequence[Any]] | None = None
    non_core_sample: int | None = None
    non_core_kinds: Sequence[str] = (HEAD_KIND,)
    mode: str = "mean"
    seed: int = 0
    show_progress: bool = True


# The old keyword arguments of `ablation_table` -> (the object that holds them now, its field).
ABLATION_KEYWORDS: dict[str, tuple[str, str]] = {
    **{name: ("options", name) for name in AblationOptions.__dataclass_fields__},
    **{name: ("evaluation", name) for name in EvaluationOptions.__dataclass_fields__},
}


def ablation_inputs(options: AblationOptions | None, evaluation: EvaluationOptions | None,
                    keywords: Mapping[str, Any]) -> tuple[AblationOptions, EvaluationOptions]:
    """The settings objects of `ablation_table` from the objects given and the old keywords (a keyword of an object
    passed whole is refused, since one of the two would be ignored)."""
    unknown = sorted(set(keywords) - set(ABLATION_KEYWORDS))
    if unknown:
        raise TypeError(f"ablation_table() got unexpected keyword argument(s) {unknown}.")
    given = {"options": options, "evaluation": evaluation}
    values: dict[str, dict[str, Any]] = {"options": {}, "evaluation": {}}
    for keyword, value in keywords.items():
        owner, name = ABLATION_KEYWORDS[keyword]
        if given[owner] is not None:
            raise ValueError(f"ablation_table got {owner}= and {keyword}=; set {name} in the {owner} object instead.")
        values[owner][name] = value
    return options or AblationOptions(**values["options"]), evaluation or EvaluationOptions(**values["evaluation"])


def ablation_table(model: PrunableModel, eval_sets: Mapping[str, Any], units: Sequence[Any], *,
                   options: AblationOptions | None = None, evaluation: EvaluationOptions | None = None,
                   full_model_cache: dict | None = None, **keywords: Any) -> AblationTable:
    """Ablate each of `units` alone from the full model, then each group in `joint` together, and report the
    accuracy change per evaluation set next to the average change over non-core units. Members of `joint` groups
    that are not in `units` get single rows too (after those of `units`), since the sums are built from them.

    `core` (default: `units`) is excluded from the non-core pool, which holds every unit of `non_core_kinds`
    (default: heads) outside it; `non_core_sample` of them are drawn with `seed` (default: all). `joint` defaults
    to `[units]` when there are at least two units. A joint row carries `sum_of_singles` and `super_additive`
    (per set: the joint change is larger in size than the sum of the single changes, as when removing three core
    heads together costs far more than the three drops added up). `mode`: "mean", "zero" or "resample".
    The settings travel as `options` (`AblationOptions`) and `evaluation` (`EvaluationOptions`); their fields are
    also accepted as keyword arguments (`mode=`, `batch_size=`, ...), as before.
    """
    options, evaluation = ablation_inputs(options, evaluation, keywords)
    plan = _plan(model.mask_shapes(), units, options)
    kwargs = {**evaluation.evaluate_kwargs(),
              "full_model_cache": full_model_cache if full_model_cache is not None else {}}
    with model.masks_disabled():
        full = {n: e["accuracy"] for n, e in evaluate_subnetwork(model, eval_sets, **kwargs).items()
                if "accuracy" in e}
    if not full:
        raise ValueError("ablation_table needs evaluation sets with labels (a 'label' or 'labels' column).")
    return _measure(model, eval_sets, plan, options, full, kwargs)


@dataclass
class _Plan:
    """What one table ablates: the shapes, the units with single rows, the joint groups and the non-core pool."""

    shapes: dict[str, tuple[int, ...]]
    units: list[Unit]
    groups: list[list[Unit]]
    pool: list[Unit]
    kinds: list[str]


def _plan(shapes: Mapping[str, Sequence[int]], units: Sequence[Any], options: AblationOptions) -> _Plan:
    """Phase 1: the units, groups and non-core pool (drawn with the seed), checked against the shapes before any
    evaluation runs."""
    shapes = {kind: tuple(shape) for kind, shape in shapes.items()}
    units = [parse_unit(u) for u in units]
    core_units = {parse_unit(u) for u in (options.core if options.core is not None else units)}
    joint = options.joint if options.joint is not None else ([units] if len(units) > 1 else [])
    groups = [[parse_unit(u) for u in g] for g in joint]
    kinds = [options.non_core_kinds] if isinstance(options.non_core_kinds, str) else list(options.non_core_kinds)
    pool = [u for u in all_units(shapes, kinds) if u not in core_units]
    masks_without([*units, *(u for g in groups for u in g)], shapes)      # out-of-range units fail before any work
    if options.non_core_sample is not None and options.non_core_sample < len(pool):
        generator = torch.Generator().manual_seed(options.seed)
        order = torch.randperm(len(pool), generator=generator)[:options.non_core_sample]
        pool = [pool[i] for i in sorted(order.tolist())]
    return _Plan(shapes, units, groups, pool, kinds)


def _measure(model: PrunableModel, eval_sets: Mapping[str, Any], plan: _Plan, options: AblationOptions,
             full: dict[str, float], kwargs: dict[str, Any]) -> AblationTable:
    """Phase 2: every single and joint ablation, and the rows built from them."""
    units, groups, pool = plan.units, plan.groups, plan.pool
    singles_needed = list(dict.fromkeys([*units, *(u for g in groups for u in g), *pool]))
    progress = tqdm(total=len(singles_needed) + len(groups), disable=not options.show_progress, desc="ablations",
                    leave=False)

    def accuracy_without(ablated: Sequence[Unit]) -> dict[str, float]:
        results = evaluate_subnetwork(model, eval_sets, masks=masks_without(ablated, plan.shapes),
                                      ablation=options.mode, **kwargs)
        progress.update(1)
        return {n: results[n]["accuracy"] for n in full}

    single_accuracy = {u: accuracy_without([u]) for u in singles_needed}
    delta = {u: {n: single_accuracy[u][n] - full[n] for n in full} for u in singles_needed}
    members = list(dict.fromkeys(u for g in groups for u in g if u not in units))   # shown too: sums add them
    rows = [AblationRow(unit_label(u), [u], "single", single_accuracy[u], delta[u]) for u in [*units, *members]]
    for group in groups:
        accuracy = accuracy_without(group)
        joint_delta = {n: accuracy[n] - full[n] for n in full}
        sums = {n: float(sum(delta[u][n] for u in group)) for n in full}
        rows.append(AblationRow(group_label(group), group, "joint", accuracy, joint_delta, sum_of_singles=sums,
                                super_additive={n: abs(joint_delta[n]) > abs(sums[n]) + 1e-12 for n in full}))
    progress.close()
    non_core = [AblationRow(unit_label(u), [u], "single", single_accuracy[u], delta[u]) for u in pool]
    if pool:
        kind_word = "head" if set(plan.kinds) == {HEAD_KIND} else "unit"
        rows.append(AblationRow(
            f"average non-core {kind_word} (n={len(pool)})", pool, "non_core_average",
            {n: float(np.mean([single_accuracy[u][n] for u in pool])) for n in full},
            {n: float(np.mean([delta[u][n] for u in pool])) for n in full},
            std={n: float(np.std([delta[u][n] for u in pool])) for n in full}))
    return AblationTable(options.mode, full, rows, non_core)
