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

from ..evaluation.subnetwork import evaluate_subnetwork
from ..model import PrunableModel
from .units import HEAD_KIND, Unit, all_units, group_label, masks_without, parse_unit, unit_label

__all__ = ["AblationRow", "AblationTable", "ablation_table"]


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


def ablation_table(model: PrunableModel, eval_sets: Mapping[str, Any], units: Sequence[Any], *,
                   core: Sequence[Any] | None = None, joint: Sequence[Sequence[Any]] | None = None,
                   non_core_sample: int | None = None, non_core_kinds: Sequence[str] = (HEAD_KIND,),
                   mode: str = "mean", seed: int = 0, batch_size: int = 32, collate_fn: Any = None,
                   collapse_to_entailment: Any = "auto", entailment_id: int = 0,
                   full_model_cache: dict | None = None, show_progress: bool = True) -> AblationTable:
    """Ablate each of `units` alone from the full model, then each group in `joint` together, and report the
    accuracy change per evaluation set next to the average change over non-core units. Members of `joint` groups
    that are not in `units` get single rows too (after those of `units`), since the sums are built from them.

    `core` (default: `units`) is excluded from the non-core pool, which holds every unit of `non_core_kinds`
    ("heads", "mlps") outside it; `non_core_sample` of them are drawn with `seed` (default: all). `joint` defaults
    to `[units]` when there are at least two units. A joint row carries `sum_of_singles` and `super_additive`
    (per set: the joint change is larger in size than the sum of the single changes, as when removing three core
    heads together costs far more than the three drops added up). `mode`: "mean", "zero" or "resample".
    """
    from tqdm.auto import tqdm

    shapes = model.mask_shapes()
    units = [parse_unit(u) for u in units]
    core_units = {parse_unit(u) for u in (core if core is not None else units)}
    groups = [[parse_unit(u) for u in g] for g in (joint if joint is not None else ([units] if len(units) > 1 else []))]
    kinds = [non_core_kinds] if isinstance(non_core_kinds, str) else list(non_core_kinds)
    pool = [u for u in all_units(shapes, kinds) if u not in core_units]
    masks_without([*units, *(u for g in groups for u in g)], shapes)      # out-of-range units fail before any work
    cache = full_model_cache if full_model_cache is not None else {}
    kwargs = dict(batch_size=batch_size, collate_fn=collate_fn, collapse_to_entailment=collapse_to_entailment,
                  entailment_id=entailment_id, full_model_cache=cache)
    with model.masks_disabled():
        full = {n: e["accuracy"] for n, e in evaluate_subnetwork(model, eval_sets, **kwargs).items()
                if "accuracy" in e}
    if not full:
        raise ValueError("ablation_table needs evaluation sets with labels (a 'label' or 'labels' column).")

    if non_core_sample is not None and non_core_sample < len(pool):
        order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))[:non_core_sample]
        pool = [pool[i] for i in sorted(order.tolist())]

    singles_needed = list(dict.fromkeys([*units, *(u for g in groups for u in g), *pool]))
    progress = tqdm(total=len(singles_needed) + len(groups), disable=not show_progress, desc="ablations", leave=False)

    def accuracy_without(ablated: Sequence[Unit]) -> dict[str, float]:
        results = evaluate_subnetwork(model, eval_sets, masks=masks_without(ablated, shapes), ablation=mode, **kwargs)
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
        kind_word = "head" if set(kinds) == {HEAD_KIND} else "unit"
        rows.append(AblationRow(
            f"average non-core {kind_word} (n={len(pool)})", pool, "non_core_average",
            {n: float(np.mean([single_accuracy[u][n] for u in pool])) for n in full},
            {n: float(np.mean([delta[u][n] for u in pool])) for n in full},
            std={n: float(np.std([delta[u][n] for u in pool])) for n in full}))
    return AblationTable(mode, full, rows, non_core)
