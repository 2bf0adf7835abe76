"""Turning learned mask scores into 0/1 masks, and the one check that a sparsity is a fraction.

Exact top-k is the default binarization for every relaxation: it hits a requested sparsity exactly (globally, or per
layer with `groups`) and reports what it hit. Each relaxation also has its paper's own threshold rule
(`Relaxation.threshold_masks`).
"""

from __future__ import annotations

import math
import numbers
from typing import Any, Mapping

import torch

__all__ = ["binarize_masks", "check_sparsity", "smallest_indices", "topk_binarize"]


def check_sparsity(value: Any, what: str = "sparsity", *, allow_one: bool = False,
                   error: type[Exception] = ValueError) -> float:
    """`value` as a float fraction in [0, 1) ([0, 1] with `allow_one`), or `error` naming the problem.

    Percentages are the usual mistake (50 for 0.5), so the message says how to fix them.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise error(f"{what} must be a number, a fraction such as 0.5, got {value!r}.")
    number = float(value)
    inside = 0.0 <= number <= 1.0 if allow_one else 0.0 <= number < 1.0
    if not (math.isfinite(number) and inside):
        interval = "[0, 1]" if allow_one else "[0, 1)"
        hint = f" (pass fractions, e.g. {number / 100:g} for {number:g}%)" if 1.0 <= number <= 100.0 else ""
        raise error(f"{what} must be a fraction in {interval}, got {value!r}{hint}.")
    return number


def smallest_indices(scores: torch.Tensor, k: int) -> torch.Tensor:
    """Indices of the k smallest scores; ties broken by position so results are reproducible."""
    order = torch.sort(scores.detach().float(), stable=True).indices
    return order[:k]


def topk_binarize(scores: torch.Tensor, sparsity: float, groups: torch.Tensor | None = None) -> torch.Tensor:
    """0/1 mask over `scores` (1-D) pruning exactly round(sparsity * n) lowest-scoring units.

    With `groups` (one integer per unit, e.g. its layer), the count round(sparsity * n_g) is taken per group.
    """
    check_sparsity(sparsity)
    scores = scores.detach().flatten()
    mask = torch.ones_like(scores, dtype=torch.float32)
    if groups is None:
        k = int(round(sparsity * scores.numel()))
        mask[smallest_indices(scores, k)] = 0.0
        return mask
    for group in torch.unique(groups):
        members = torch.nonzero(groups == group).flatten()
        k = int(round(sparsity * members.numel()))
        mask[members[smallest_indices(scores[members], k)]] = 0.0
    return mask


def binarize_masks(kinds: Mapping[str, Any], logits: Mapping[str, torch.Tensor], forced: Mapping[str, torch.Tensor],
                   relaxation: Any, *, binary: bool, sparsity: float | None, rule: str, per_layer: bool,
                   threshold: float) -> dict[str, torch.Tensor]:
    """Masks of every kind from learned logits (kinds without logits are all ones; forced entries stay forced).

    `binary=False`: the relaxation's noise-free value. With a `sparsity`: exact top-k over the logits of every kind
    together (`per_layer`: the same share in every layer of every stack). Without one: the relaxation's own rule
    (`rule="threshold"`, e.g. the paper's deterministic-then-threshold rule for hard concrete).
    """
    if not binary or sparsity is None:
        masks = {}
        for kind, spec in kinds.items():
            logit = logits.get(kind)
            if logit is None:
                masks[kind] = torch.ones(spec.shape)
                continue
            value = relaxation.deterministic(logit.detach().float()).cpu() if not binary \
                else relaxation.threshold_masks(logit, threshold)
            pinned = forced[kind].cpu()
            masks[kind] = torch.where(pinned != 0, (pinned > 0).float(), value)
        return masks
    scores, groups, group_ids = [], [], {}
    for kind, logit in logits.items():
        spec = kinds[kind]
        pinned = forced[kind].cpu()
        scores.append(torch.where(pinned != 0, pinned * 1e9, logit.detach().float().cpu()).flatten())
        if per_layer:   # one group per (stack, layer); built with tensor ops (weight kinds have millions of entries)
            layers = spec.shape[spec.layer_dim] if spec.layer_dim is not None else 1
            lookup = torch.tensor([group_ids.setdefault((spec.stack, layer), len(group_ids))
                                   for layer in range(layers)], dtype=torch.long)
            groups.append(lookup[spec.layer_index().flatten()])
    flat = topk_binarize(torch.cat(scores), sparsity, torch.cat(groups) if per_layer else None)
    masks, offset = {}, 0
    for kind, spec in kinds.items():
        if logits.get(kind) is not None:
            masks[kind] = flat[offset:offset + spec.numel].view(spec.shape)
            offset += spec.numel
        else:
            masks[kind] = torch.ones(spec.shape)
    return masks
