"""Units, their labels, and the conversions between mask artifacts, units and masks by kind.

Masks move through the analyses as dicts keyed by mask kind (`{"heads": [L, H], "mlps": [L]}` today). A *unit* is one
entry of one kind's mask: `(layer, head)` for a head, `("mlp", layer)` for an MLP block, labelled "L4.H0" and
"L3.MLP". This module is the one place in `analysis/` that reads and writes units; which kinds exist, their axes and
how an entry is written as a unit it asks the unit granularity (`UnitGranularity.mask_kinds`, `kind_axes`,
`unit_of`, `kind_and_index`, `pruned_flags`).
"""

from __future__ import annotations

import itertools
import os
from typing import Any, Iterable, Mapping, Sequence

import torch

from ..artifacts import MaskArtifact, read_artifact
from ..granularity import get_granularity
from ..granularity.unit.granularity import UnitGranularity

__all__ = [
    "BLOCK_KIND", "HEAD_KIND", "Unit", "ablation_masks", "all_units", "artifact_masks", "group_label", "kept_units",
    "make_unit", "masks_without", "parse_unit", "pruned_kinds", "read_masks", "run_name", "sparsity_tag", "unit_index",
    "unit_kind", "unit_label", "units_from_masks",
]

Unit = tuple  # (layer, head) or ("mlp", layer)

# Mask kind -> the names of its mask's dimensions, for messages ("2 layers x 4 heads"): the unit granularity's.
KIND_AXES: dict[str, tuple[str, ...]] = dict(UnitGranularity.kind_axes)
# The unit granularity's head and MLP-block kinds, as the reports' records key them.
HEAD_KIND: str = UnitGranularity.head_kind
BLOCK_KIND: str = UnitGranularity.block_kind


# --------------------------------------------------------------------------------------------------------------------
# Run names
# --------------------------------------------------------------------------------------------------------------------


def sparsity_tag(sparsity: float) -> str:
    """`sp50` for 0.5 (`sp12.5` when the percentage is not whole)."""
    percent = sparsity * 100
    return f"sp{round(percent):02d}" if abs(percent - round(percent)) < 1e-9 else f"sp{percent:g}"


def run_name(sparsity: float, seed: int) -> str:
    """`sp50-seed3`: the folder of the run at sparsity 0.5 with seed 3."""
    return f"{sparsity_tag(sparsity)}-seed{seed}"


# --------------------------------------------------------------------------------------------------------------------
# Units and labels
# --------------------------------------------------------------------------------------------------------------------


def unit_kind(unit: Unit) -> str:
    """The mask kind a unit belongs to (the unit granularity's: heads or MLP blocks)."""
    return UnitGranularity.kind_and_index(parse_unit(unit))[0]


def unit_index(unit: Unit) -> tuple[int, ...]:
    """The unit's index into its kind's mask: `(layer, head)` or `(layer,)`."""
    return UnitGranularity.kind_and_index(parse_unit(unit))[1]


def make_unit(kind: str, index: Sequence[int]) -> Unit:
    """The unit at `index` of the `kind` mask (the inverse of `unit_kind` / `unit_index`)."""
    if kind not in KIND_AXES:
        raise ValueError(f"Unknown mask kind {kind!r}; the analyses know {sorted(KIND_AXES)}.")
    index = tuple(int(i) for i in index)
    if len(index) != len(KIND_AXES[kind]):
        raise ValueError(f"A {kind} unit needs {len(KIND_AXES[kind])} indices ({' x '.join(KIND_AXES[kind])}), "
                         f"got {index}.")
    return UnitGranularity.unit_of(kind, index)


def unit_label(unit: Unit) -> str:
    """"L4.H0" for head (4, 0), "L3.MLP" for ("mlp", 3) (the unit granularity's labels)."""
    return UnitGranularity.unit_label(parse_unit(unit))


def parse_unit(unit: Any) -> Unit:
    """A unit from "L4.H0" / "L4H0" / "L3.MLP", `(4, 0)` or `("mlp", 3)`; always returns the tuple form."""
    return UnitGranularity.parse_unit(unit)


def group_label(units: Sequence[Unit], max_named: int = 4) -> str:
    """"L2.H5 + L3.H7 + L4.H0"; larger groups are summarized so the label stays readable in a figure."""
    labels = [unit_label(u) for u in units]
    if len(labels) <= max_named:
        return " + ".join(labels)
    return f"{len(labels)} units jointly ({' + '.join(labels[:2])} + ...)"


# --------------------------------------------------------------------------------------------------------------------
# Masks by kind <-> units
# --------------------------------------------------------------------------------------------------------------------


def kept_units(masks: Mapping[str, Any]) -> list[Unit]:
    """The kept (non-zero) units of masks by kind, kind by kind in the dict's order; kinds given as None are
    skipped."""
    units: list[Unit] = []
    for kind, mask in masks.items():
        if mask is not None:
            units += [make_unit(kind, index) for index in torch.as_tensor(mask).nonzero().tolist()]
    return units


def units_from_masks(heads: Any = None, mlps: Any = None) -> list[Unit]:
    """The kept units (value 1) of a head mask `[L, H]` and an MLP mask `[L]`, heads first."""
    return kept_units(dict(zip(UnitGranularity.mask_kinds, (heads, mlps))))


def all_units(shapes: Mapping[str, Sequence[int]], kinds: Iterable[str] | None = None) -> list[Unit]:
    """Every unit of the masks of `shapes` (e.g. `model.mask_shapes()`), limited to `kinds` if given."""
    shapes = {kind: tuple(shape) for kind, shape in shapes.items()}
    if kinds is not None:
        kinds = list(kinds)
        unknown = [k for k in kinds if k not in shapes]
        if unknown:
            raise ValueError(f"Unknown mask kind(s) {unknown}; this model's kinds are {list(shapes)}.")
    return [make_unit(kind, index) for kind, shape in shapes.items() if kinds is None or kind in kinds
            for index in itertools.product(*(range(n) for n in shape))]


def masks_without(units: Iterable[Any], shapes: Mapping[str, Sequence[int]]) -> dict[str, torch.Tensor]:
    """All-ones masks of `shapes` (e.g. `model.mask_shapes()`) with `units` set to 0 (ablated)."""
    masks = {kind: torch.ones(tuple(shape)) for kind, shape in shapes.items()}
    for unit in units:
        unit = parse_unit(unit)
        kind, index = unit_kind(unit), unit_index(unit)
        if kind not in masks:
            raise ValueError(f"{unit_label(unit)} is a {kind} unit, but the masks have only {list(masks)}.")
        shape = tuple(masks[kind].shape)
        if not all(0 <= i < n for i, n in zip(index, shape)):
            size = " x ".join(f"{n} {axis}" for n, axis in zip(shape, KIND_AXES[kind]))
            raise ValueError(f"{unit_label(unit)} is out of range: the model has {size}.")
        masks[kind][index] = 0
    return masks


def ablation_masks(units: Iterable[Any], num_layers: int, num_heads: int) -> dict[str, torch.Tensor]:
    """All-ones masks with `units` set to 0 (ablated)."""
    return masks_without(units, dict(zip(UnitGranularity.mask_kinds, ((num_layers, num_heads), (num_layers,)))))


# --------------------------------------------------------------------------------------------------------------------
# Artifacts -> masks by kind
# --------------------------------------------------------------------------------------------------------------------


def artifact_masks(artifact: MaskArtifact) -> dict[str, torch.Tensor]:
    """An artifact's masks by kind: its `.masks` dict where the artifact has one, else `.heads` and `.mlps`."""
    masks = getattr(artifact, "masks", None)
    if isinstance(masks, Mapping):
        return dict(masks)
    return {kind: getattr(artifact, kind) for kind in UnitGranularity.mask_kinds}   # `.heads`, `.mlps`


def read_masks(path: str | os.PathLike) -> dict[str, torch.Tensor]:
    """The masks by kind of the artifact at `path` (a run folder)."""
    return artifact_masks(read_artifact(path))


def pruned_kinds(artifact: MaskArtifact) -> list[str]:
    """The kinds the artifact's run pruned (the others' masks are all ones by construction): those of its
    granularity, less the ones its config turned off (`Granularity.pruned_flags`: `prune_heads`, `prune_mlps`)."""
    config = artifact.config
    granularity = get_granularity(config.granularity)
    flags = granularity.pruned_flags
    return [kind for kind in granularity.mask_kinds if kind not in flags or getattr(config, flags[kind])]
