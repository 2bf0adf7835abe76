"""The mask-statistics section of the report: head frequency, the core, overlap between seeds, Spearman's rho.

Everything here reads only the runs' saved artifacts, so it works without the model, long after the runs.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from ..artifacts import read_artifact
from .mask_stats import MaskStatsError, core, head_frequency, iomin, iou, joint_frequency, mlp_frequency, spearman
from .units import BLOCK_KIND, HEAD_KIND, artifact_masks, make_unit, pruned_kinds, sparsity_tag, unit_label

__all__ = ["load_run_masks", "mask_statistics"]


def load_run_masks(runs_dir: Path, rows: Sequence[Mapping[str, Any]]) -> dict[float, list[dict[str, Any]]]:
    """`{sparsity: [{"seed", "heads", "mlps", "prune_mlps"}, ...]}` from the run artifacts, seeds in order: the
    input of `mask_statistics` (masks as 0/1 int64 by kind, and whether the run pruned MLP blocks)."""
    by_sparsity: dict[float, list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: (r["sparsity"], r["seed"])):
        artifact = read_artifact(runs_dir / row["run"])
        masks = {kind: mask.round().long() for kind, mask in artifact_masks(artifact).items()}
        by_sparsity.setdefault(row["sparsity"], []).append(
            {"seed": row["seed"], **masks, "prune_mlps": BLOCK_KIND in pruned_kinds(artifact)})
    return by_sparsity


def _pairwise(masks: Sequence[torch.Tensor]) -> dict[str, Any]:
    """IoU and IoMin of kept heads over every pair of seeds: mean, std, min, max."""
    pairs = list(itertools.combinations(range(len(masks)), 2))
    if not pairs:
        return {"num_pairs": 0}
    out: dict[str, Any] = {"num_pairs": len(pairs)}
    for name, fn in (("iou", iou), ("iomin", iomin)):
        values = np.array([fn(masks[i], masks[j]) for i, j in pairs], dtype=float)
        out[name] = {"mean": float(values.mean()), "std": float(values.std()), "min": float(values.min()),
                     "max": float(values.max())}
    return out


def mask_statistics(masks: Mapping[float, Sequence[Mapping[str, Any]]]) -> dict[str, Any]:
    """Head frequency, the core with its chance size, IoU / IoMin between seeds per sparsity, and Spearman's rho
    (with the joint frequency matrix) for every pair of sparsities. Heads follow the paper's definitions (the
    chance size `N (1 - s)^k` uses N heads and the mean realized head sparsity s); MLP blocks are listed
    alongside (their frequency and the core MLPs; `None` when the runs did not prune MLP blocks)."""
    per_sparsity: dict[str, Any] = {}
    for sparsity, runs in masks.items():
        heads = [r[HEAD_KIND] for r in runs]
        mlps = [r[BLOCK_KIND] for r in runs]
        head_core = core(heads)
        mlps_pruned = all(r.get("prune_mlps", True) for r in runs)
        mlp_core = [unit_label(make_unit(BLOCK_KIND, u)) for u in core(mlps).units] if mlps_pruned else None
        per_sparsity[sparsity_tag(sparsity)] = {
            "sparsity": sparsity, "seeds": [r["seed"] for r in runs], "num_masks": len(runs),
            "head_frequency": head_frequency(heads).tolist(), "mlp_frequency": mlp_frequency(mlps).tolist(),
            "core": {HEAD_KIND: [unit_label(make_unit(HEAD_KIND, u)) for u in head_core.units],
                     BLOCK_KIND: mlp_core,
                     "size": head_core.size, "chance_size": head_core.chance_size, "num_heads": head_core.num_units,
                     "head_sparsity": head_core.sparsity},
            "overlap": _pairwise(heads),
        }
    correlations = []
    for a, b in itertools.combinations(list(masks), 2):
        heads_a, heads_b = [r[HEAD_KIND] for r in masks[a]], [r[HEAD_KIND] for r in masks[b]]
        entry: dict[str, Any] = {"sparsity_a": a, "sparsity_b": b,
                                 "joint_frequency": joint_frequency(heads_a, heads_b).tolist()}
        try:
            entry["rho"], entry["p_value"] = spearman(head_frequency(heads_a), head_frequency(heads_b))
        except MaskStatsError as err:
            entry["rho"], entry["p_value"], entry["note"] = None, None, str(err)
        correlations.append(entry)
    return {"per_sparsity": per_sparsity, "spearman": correlations}
