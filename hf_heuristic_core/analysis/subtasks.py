"""Which weights implement which subtask: Lepori's subtask test and Csordás' mask comparisons.

Masks are dicts by kind (`PrunableModel.get_masks()`, `read_artifact(...).masks`). A "layer" is one weight tensor
for weight masks (kinds named like parameters, with dots: Csordás' per-layer plots are per weight matrix) and one
row along dim 0 for unit / neuron kinds (`heads[3]`, `neurons[0]`).

- Lepori et al. (*Break It Down*), for a mask m_A trained on subtask A: the subnetwork `Sub = M(w * m_A)` and the
  ablated model `Abl = M(w * (1 - m_A))` (the subnetwork's weights set to zero, everything else kept) are scored on
  A ("target") and on B ("other"); accuracies are clamped to [chance, 1] before the differences
  `D_sub = a(Sub, A) - a(Sub, B)` and `D_abl = a(Abl, A) - a(Abl, B)`. Evidence of a modular subroutine is
  `D_sub > 0` and `D_abl < 0`; the control ablates as many random entries per layer as the subnetwork holds.
- Csordás et al. (*Are Neural Nets Modular?*): accuracies of masks and their inversions `NOT M = 1 - M` on every
  task (the performance-drop table), per-layer IoU `|A & B| / |A | B|` and IoMin `|A & B| / min(|A|, |B|)`, the
  shared fraction `|M_i & OR_{j != i} M_j| / |M_i|` per layer (total: the same ratio summed over layers), and the
  `specialization` (acc(M_A; A) - acc(M_A; B)) and `exclusivity` (acc(NOT M_A; B) - acc(NOT M_A; A)) scores from
  which P_specialize / P_reuse are read (the papers read them off these numbers; the scores are ours).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Mapping

import torch

__all__ = ["LeporiResult", "clamp_accuracy", "complement_masks", "invert_masks", "layer_masks", "mask_overlap",
           "performance_drop_table", "random_ablation_masks", "remaining_fraction", "sharing_fractions",
           "sharing_over_union", "specialization_scores", "subtask_test"]

Masks = Mapping[str, torch.Tensor]


def layer_masks(masks: Masks) -> dict[str, torch.Tensor]:
    """Flat boolean masks per layer (see the module docstring for what a layer is)."""
    layers: dict[str, torch.Tensor] = {}
    for kind, mask in masks.items():
        mask = torch.as_tensor(mask).detach().cpu() > 0.5
        if _whole(kind, mask):
            layers[kind] = mask.flatten()
        else:
            layers.update({f"{kind}[{i}]": mask[i].flatten() for i in range(mask.shape[0])})
    return layers


def invert_masks(masks: Masks, kinds: list[str] | None = None) -> dict[str, torch.Tensor]:
    """Csordás' NOT M: 1 - M on the masked kinds (all, or `kinds`); unmasked tensors (embeddings) are not kinds."""
    return {kind: (1.0 - mask.float()) if kinds is None or kind in kinds else mask.float()
            for kind, mask in masks.items()}


complement_masks = invert_masks   # Lepori's ablated model M(w * (1 - m)) is the same operation


def random_ablation_masks(masks: Masks, generator: torch.Generator) -> dict[str, torch.Tensor]:
    """All-ones masks with as many random entries per layer set to 0 as `masks` keeps there (the ablation control)."""
    out: dict[str, torch.Tensor] = {}
    for kind, mask in masks.items():
        mask = torch.as_tensor(mask).float()
        whole = _whole(kind, mask)
        result = []
        for row in ([mask] if whole else list(mask)):
            flat = torch.ones(row.numel())
            kept = int((row > 0.5).sum())
            flat[torch.randperm(row.numel(), generator=generator)[:kept]] = 0.0
            result.append(flat.view(row.shape))
        out[kind] = result[0] if whole else torch.stack(result)
    return out


def _whole(kind: str, mask: torch.Tensor) -> bool:
    """A weight tensor (parameter names have dots) or a 1-D kind is one layer; other kinds have a layer per row."""
    return "." in kind or mask.dim() < 2


def clamp_accuracy(accuracy: float, chance: float) -> float:
    """Lepori's clamp to [chance, 1], so below-chance noise does not count as a difference."""
    return min(max(float(accuracy), chance), 1.0)


@dataclass
class LeporiResult:
    """The subtask test of one mask: raw and clamped accuracies, the two differences, and the random control."""

    sub_target: float
    sub_other: float
    abl_target: float
    abl_other: float
    chance: float
    d_sub: float
    d_abl: float
    random_d_abl: list[float] = field(default_factory=list)

    @property
    def evidence(self) -> bool:
        """D_sub > 0 and D_abl < 0, with D_abl below every random ablation of the same per-layer size."""
        below_random = not self.random_d_abl or self.d_abl < min(self.random_d_abl)
        return self.d_sub > 0 and self.d_abl < 0 and below_random

    def to_dict(self) -> dict[str, Any]:
        values = asdict(self)
        values["evidence"] = self.evidence
        if self.random_d_abl:
            tensor = torch.tensor(self.random_d_abl)
            values["random_d_abl_mean"] = float(tensor.mean())
            values["random_d_abl_std"] = float(tensor.std()) if len(self.random_d_abl) > 1 else 0.0
        return values


def lepori_differences(sub_target: float, sub_other: float, abl_target: float, abl_other: float,
                       chance: float) -> tuple[float, float]:
    """(D_sub, D_abl) from accuracies, each clamped to [chance, 1] first."""
    c = [clamp_accuracy(a, chance) for a in (sub_target, sub_other, abl_target, abl_other)]
    return c[0] - c[1], c[2] - c[3]


def subtask_test(model: Any, masks: Masks, accuracy_target: Callable[[Any], float],
                 accuracy_other: Callable[[Any], float], chance: float, random_controls: int = 5,
                 seed: int = 0) -> LeporiResult:
    """Lepori's test for `masks` (trained on the target subtask) on a `PrunableModel`.

    `accuracy_target(model)` / `accuracy_other(model)` score the model as it is (masks fixed, eval mode) on the
    target and the other subtask. Kinds not in `masks` keep their current masks.
    """
    def scored(fixed: Masks) -> tuple[float, float]:
        with model.masks_applied(dict(fixed)):
            model.eval()
            return float(accuracy_target(model)), float(accuracy_other(model))

    sub = scored(masks)
    abl = scored(complement_masks(masks))
    d_sub, d_abl = lepori_differences(*sub, *abl, chance)
    generator = torch.Generator().manual_seed(seed)
    randoms = [lepori_differences(0, 0, *scored(random_ablation_masks(masks, generator)), chance)[1]
               for _ in range(random_controls)]
    return LeporiResult(sub[0], sub[1], abl[0], abl[1], chance, d_sub, d_abl, randoms)


def mask_overlap(a: Masks, b: Masks) -> dict[str, dict[str, float]]:
    """Per layer: |A|, |B|, IoU and IoMin (NaN where both masks are empty there), plus a "total" row."""
    la, lb = layer_masks(a), layer_masks(b)
    rows: dict[str, dict[str, float]] = {}
    totals = [0, 0, 0, 0]
    for layer in la:
        x, y = la[layer], lb[layer]
        inter, union = int((x & y).sum()), int((x | y).sum())
        size_a, size_b = int(x.sum()), int(y.sum())
        rows[layer] = _overlap_row(size_a, size_b, inter, union)
        totals = [t + v for t, v in zip(totals, (size_a, size_b, inter, union))]
    rows["total"] = _overlap_row(*totals)
    return rows


def _overlap_row(size_a: int, size_b: int, inter: int, union: int) -> dict[str, float]:
    smaller = min(size_a, size_b)
    return {"size_a": size_a, "size_b": size_b, "intersection": inter,
            "iou": inter / union if union else math.nan, "iomin": inter / smaller if smaller else math.nan}


def sharing_fractions(masks_by_name: Mapping[str, Masks]) -> dict[str, dict[str, float]]:
    """Csordás' shared weights: per mask and layer |M_i & OR_{j != i} M_j| / |M_i|, and "total", the same quantity
    over all layers: sum_l |M_i & OR_{j != i} M_j| / sum_l |M_i| (the share of mask i's kept entries that another
    mask keeps too). Until this release "total" divided by the union of all masks instead (for two masks, their
    IoU), which is not the per-layer quantity: that number is `sharing_over_union`."""
    names = list(masks_by_name)
    layered = {name: layer_masks(masks) for name, masks in masks_by_name.items()}
    layers = list(layered[names[0]])
    result: dict[str, dict[str, float]] = {}
    for name in names:
        row: dict[str, float] = {}
        shared_total = own_total = 0
        for layer in layers:
            own = layered[name][layer]
            others = torch.zeros_like(own)
            for other in names:
                if other != name:
                    others |= layered[other][layer]
            shared = int((own & others).sum())
            row[layer] = shared / int(own.sum()) if int(own.sum()) else math.nan
            shared_total += shared
            own_total += int(own.sum())
        row["total"] = shared_total / own_total if own_total else math.nan
        result[name] = row
    return result


def sharing_over_union(masks_by_name: Mapping[str, Masks]) -> dict[str, float]:
    """Per mask, sum_l |M_i & OR_{j != i} M_j| / sum_l |OR_j M_j|: the shared entries over the union of all masks,
    as Csordás' plotting code totals them (for two masks: their IoU). Not the per-layer shared fraction's total
    (`sharing_fractions(...)[name]["total"]`)."""
    names = list(masks_by_name)
    layered = {name: layer_masks(masks) for name, masks in masks_by_name.items()}
    result: dict[str, float] = {}
    for name in names:
        shared_total = union_total = 0
        for layer, own in layered[name].items():
            others = torch.zeros_like(own)
            for other in names:
                if other != name:
                    others |= layered[other][layer]
            shared_total += int((own & others).sum())
            union_total += int((own | others).sum())
        result[name] = shared_total / union_total if union_total else math.nan
    return result


def remaining_fraction(mask: Masks, reference: Masks) -> dict[str, float]:
    """Per layer |M_k & M_0| / |M_0|: how much of the full-task mask M_0 a subtask mask keeps."""
    lm, lr = layer_masks(mask), layer_masks(reference)
    out = {layer: int((lm[layer] & lr[layer]).sum()) / int(lr[layer].sum()) if int(lr[layer].sum()) else math.nan
           for layer in lr}
    kept = sum(int((lm[k] & lr[k]).sum()) for k in lr)
    total = sum(int(lr[k].sum()) for k in lr)
    out["total"] = kept / total if total else math.nan
    return out


def performance_drop_table(full: Mapping[str, float], scored: Mapping[str, Mapping[str, float]]
                           ) -> list[dict[str, Any]]:
    """Csordás' table: one row per mask (e.g. "M_A", "NOT M_A"), per task its accuracy and the drop from the full
    model (`full[task] - acc`)."""
    rows = []
    for mask_name, accuracies in scored.items():
        row: dict[str, Any] = {"mask": mask_name}
        for task, accuracy in accuracies.items():
            row[f"acc_{task}"] = float(accuracy)
            row[f"drop_{task}"] = float(full[task]) - float(accuracy)
        rows.append(row)
    return rows


def specialization_scores(acc_mask: Mapping[str, float], acc_inverted: Mapping[str, float], own: str,
                          other: str) -> dict[str, float]:
    """spec = acc(M_A; A) - acc(M_A; B) and excl = acc(NOT M_A; B) - acc(NOT M_A; A): both high for a subtask that
    has weights of its own (P_specialize-style); both near 0 when the weights are reused (P_reuse-style)."""
    return {"specialization": float(acc_mask[own]) - float(acc_mask[other]),
            "exclusivity": float(acc_inverted[other]) - float(acc_inverted[own])}
