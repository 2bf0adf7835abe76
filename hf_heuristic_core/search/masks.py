"""Stored masks re-scored without pruning, and the small mask helpers of the search."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from ..errors import MaskShapeError
from ..evaluation.effective_size import EffectiveSizeError
from ..model import PrunableModel

__all__ = ["all_kept", "check_known_masks", "save_level", "validated_known_masks"]


def check_known_masks(masks: Any) -> dict[int, dict[float, dict[str, torch.Tensor]]]:
    """``{seed: {sparsity: {kind: mask}}}`` with JSON's string keys accepted; every seed must list the same
    sparsities (the effective size compares levels across seeds). Which kinds a model has (and their shapes) is the
    model's to check: `validated_known_masks`."""
    example = '{0: {0.3: {"<kind>": [[1.0, 0.0, ...], ...], ...}}} (kinds as prunable.get_masks() names them)'
    if not isinstance(masks, Mapping) or not masks:
        raise EffectiveSizeError(f"masks must map seed -> sparsity -> {{kind: mask}}, e.g. {example}; "
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
            if not isinstance(unit_masks, Mapping) or not unit_masks:
                found = dict(unit_masks) if isinstance(unit_masks, Mapping) else type(unit_masks).__name__
                raise EffectiveSizeError(f"masks[{seed!r}][{level!r}] must map each mask kind to its mask, e.g. "
                                         f"{example}; got {found!r:.80}")
            levels[value] = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in unit_masks.items()}
        known[seed_id] = levels
    first = sorted(next(iter(known.values())))
    for seed_id, levels in known.items():
        if sorted(levels) != first:
            raise EffectiveSizeError(f"masks: seed {seed_id} has sparsities {sorted(levels)} but the first seed has "
                                     f"{first}; every seed needs the same levels.")
    return known


def validated_known_masks(prunable: PrunableModel,
                           known: Mapping[int, Mapping[float, Mapping[str, torch.Tensor]]]
                           ) -> dict[int, dict[float, dict[str, torch.Tensor]]]:
    """Each given mask through the model's own check (shape, finiteness and [0, 1] range), with the seed and level
    that failed named in the error."""
    validated: dict[int, dict[float, dict[str, torch.Tensor]]] = {}
    kinds = prunable.enabled_kinds()
    for seed, levels in known.items():
        validated[seed] = {}
        for level, unit_masks in levels.items():
            try:
                validated[seed][level] = prunable.validate_masks(unit_masks)
                missing = [kind for kind in kinds if kind not in validated[seed][level]]
                if missing:
                    raise MaskShapeError(f"No mask for the pruned kind(s) {missing[:4]}; this model's pruned kinds "
                                         f"are {kinds[:6]}.")
            except MaskShapeError as err:
                raise EffectiveSizeError(f"masks[{seed}][{level:g}] cannot be used on this model: {err} Masks from "
                                         "another architecture, or with values outside [0, 1], do not apply.") from err
    return validated


def all_kept(prunable: PrunableModel) -> dict[str, torch.Tensor]:
    """Masks that keep every unit, in every kind the model has (heads and MLP blocks, neurons, weights, ...)."""
    return {kind: torch.ones(shape) for kind, shape in prunable.mask_shapes().items()}


def save_level(prunable: PrunableModel, masks: Mapping[str, torch.Tensor], folder: str) -> None:
    with prunable.masks_applied(masks):
        prunable.save_pretrained(folder)

