"""Uniform layer layouts: binary masks that keep the same number of units in every layer.

A stock Transformers config states one `num_attention_heads`, one `num_key_value_heads` and one `intermediate_size`
for all layers, so only a subnetwork with the same widths in every layer can be saved as a plain checkpoint (the
constraint of Minitron and Sheared-LLaMA). `uniform_masks` turns free binary masks into such masks:

1. **Budget.** Each kind keeps, per layer, its free masks' average kept count rounded down or up (`floor(K / L)` or
   `ceil(K / L)`, in whole groups); of those combinations the one whose total kept units is closest to the free
   masks' total wins (ties: the smaller per-kind deviation, then more kept units). So the uniform subnetwork has the
   free one's sparsity up to one unit per layer and kind, and the kinds keep their learned split. MLP blocks (one
   per layer) are then kept in every layer or in none.
2. **Which units.** In every layer the `c` best-scoring units (groups) by their learned score (a group's score is the
   mean of its members'; ties: the lower index).

**Groups.** Under grouped-query attention the query heads of one key/value head (`MaskKind.unit_group`) are kept
or dropped together, so every layer keeps whole key/value groups and the stock `num_key_value_heads` holds.
**Zero heads.** When the budget rounds to no head per layer, every layer's attention is gone: under zero ablation it
adds nothing, under mean ablation it adds the constant its heads' means give (folded into the output bias by the
export); either way a stock class runs it only with a placeholder head where it cannot run zero heads
(`export.plan`). Forced units must survive the re-selection; a uniform layout that would drop one is refused.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from typing import Any

import torch

from ..errors import UsageError

__all__ = ["per_layer_counts", "uniform_masks", "uniform_sparsity_note"]


def _units_per_layer(kind: Any) -> tuple[int, int, int]:
    """(layers, groups per layer, entries per group) of a kind whose layer dimension is 0."""
    if kind.layer_dim != 0:
        raise UsageError(f"uniform_layers needs masks with a layer dimension first; {kind.name!r} has none (weight "
                         "masks). Use granularity='unit' or 'neuron'.")
    layers = kind.shape[0]
    per_layer = kind.numel // layers
    group = kind.unit_group if per_layer % kind.unit_group == 0 else 1
    return layers, per_layer // group, group


def per_layer_counts(kinds: Mapping[str, Any], free: Mapping[str, torch.Tensor]) -> dict[str, int]:
    """Groups kept per layer for every kind in `free` (see the module docstring, step 1)."""
    options, targets, shapes = [], {}, {}
    for name, mask in free.items():
        layers, groups, size = _units_per_layer(kinds[name])
        kept = float(mask.sum())
        targets[name], shapes[name] = kept, (layers, size)
        average = kept / (layers * size)
        options.append(sorted({min(groups, max(0, c)) for c in (math.floor(average), math.ceil(average))}))
    names = list(free)
    total = sum(targets.values())

    def badness(counts: tuple[int, ...]) -> tuple[float, float, float]:
        kept = [counts[i] * shapes[n][0] * shapes[n][1] for i, n in enumerate(names)]
        return (abs(sum(kept) - total), sum(abs(k - targets[n]) for k, n in zip(kept, names)), -sum(kept))

    best = min(itertools.product(*options), key=badness)
    return dict(zip(names, best))


def uniform_masks(kinds: Mapping[str, Any], free: Mapping[str, torch.Tensor], scores: Mapping[str, torch.Tensor],
                  forced: Mapping[str, torch.Tensor | None]) -> dict[str, torch.Tensor]:
    """Uniform binary masks for the kinds in `free` (free binary masks of the learned `scores`); `forced` (+1 keep,
    -1 drop, 0 free) must hold in the result."""
    counts = per_layer_counts(kinds, free)
    out = {}
    for name, mask in free.items():
        layers, groups, size = _units_per_layer(kinds[name])
        score = scores[name].detach().float().cpu().reshape(layers, groups, size).mean(dim=2)
        keep = torch.zeros(layers, groups)
        count = counts[name]
        for layer in range(layers):
            order = torch.sort(-score[layer], stable=True).indices   # best first, ties by position
            keep[layer, order[:count]] = 1.0
        result = keep.repeat_interleave(size, dim=1).reshape(mask.shape).to(mask.dtype)
        pinned = forced.get(name)
        if pinned is not None:
            pinned = pinned.cpu().reshape(mask.shape)
            lost = ((pinned > 0) & (result == 0)) | ((pinned < 0) & (result != 0))
            if bool(lost.any()):
                where = [tuple(i) for i in torch.nonzero(lost).tolist()][:4]
                raise UsageError(f"uniform_layers keeps {count * size} of {groups * size} {name} per layer, which "
                                 f"overrides forced units at {where}; force the same number of units in every layer "
                                 "(whole key/value groups), or turn uniform_layers off.")
        out[name] = result
    return out


def uniform_sparsity_note(kinds: Mapping[str, Any], uniform: Mapping[str, torch.Tensor], asked: float,
                          reached: float, asked_what: str = "target") -> str | None:
    """Why a uniform layout's sparsity `reached` differs from the `asked` one (the target, or what the free masks
    pruned), in words, from the uniform masks' per-layer counts: each kind keeps the same count in every layer, in
    whole key/value groups, and one-per-layer kinds (MLP blocks) are kept in every layer or in none. None when the
    two agree to within one unit of the enabled kinds."""
    total = sum(kinds[name].numel for name in uniform)
    if not total or abs(reached - asked) * total < 1.0 - 1e-9:
        return None
    parts = []
    for name, mask in uniform.items():
        layers, groups, size = _units_per_layer(kinds[name])
        title = kinds[name].title or name
        kept_groups = int(round(float(mask.float().sum()))) // max(layers * size, 1)
        if groups * size == 1:
            parts.append(f"{title} in every layer or in none ({'all' if kept_groups else 'none'} kept)")
            continue
        grouping = f", in whole key/value groups of {size} query heads" if size > 1 else ""
        parts.append(f"{title} {kept_groups * size} of {groups * size} per layer{grouping}")
    return (f"uniform_layers moved the sparsity from the {asked_what} {asked:.4f} to {reached:.4f}: every layer keeps "
            f"the same units: {'; '.join(parts)}; no such layout lies closer to the {asked_what}")
