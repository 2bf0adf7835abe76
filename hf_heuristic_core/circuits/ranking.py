"""From a score per unit to the circuits of MIB's sizes: which fractions, how many units, which units.

Followed from `hannamw/MIB-circuit-track` (commit b759df34):

* **Curve sizes** (`MIB_circuit_track/evaluation.py`, `evaluate_area_under_curve`): the fractions
  `(.001, .002, .005, .01, .02, .05, .1, .2, .5, 1)` of the scored items. At node level the items are the nodes with a
  score (`n_scored_items = (~isnan(nodes_scores)).sum()`), and a circuit of fraction `p` has `int(p * n)` of them,
  rounded down as Python's `int` does.
* **Which units** (`Graph.apply_topn(n, absolute, level="node")` in `EAP-IG/src/eap/graph.py`): the `n` highest scores
  (of `|score|` with `absolute=True`; `run_evaluation.py` passes `absolute=False` unless `--absolute`); units without a
  score are always kept and never counted.
* **Submission sizes** (the track's README, "Submitting to the MIB Leaderboard"): nine binary circuits with at most
  `0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50` percent of the edges each. (The README's list also shows a 0; the leaderboard
  takes exactly nine files and maps them to 0.1% .. 50% by edge count, so a tenth, empty circuit displaces one.)

Ties are broken by MIB's node order (a stable sort); MIB's own `torch.argsort` leaves their order unspecified.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

__all__ = ["MIB_CURVE_SIZES", "MIB_SUBMISSION_SIZES", "circuit_size", "random_scores", "scored_count",
           "size_label", "top_units"]

MIB_CURVE_SIZES: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
MIB_SUBMISSION_SIZES: tuple[float, ...] = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)


def circuit_size(fraction: float, n_scored: int) -> int:
    """Units in a circuit of `fraction` of `n_scored` scored units: `int(fraction * n_scored)`, as MIB counts."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"circuit size {fraction} must be a fraction in [0, 1] (0.05 for 5%).")
    return int(fraction * n_scored)


def size_label(fraction: float) -> str:
    """'0.1%' for 0.001, '50%' for 0.5 (percent, without trailing zeros)."""
    return f"{fraction * 100:.10g}%"


def _flat(scores: Mapping[str, Any], kinds: Sequence[str]) -> tuple[torch.Tensor, list[tuple[str, torch.Size]]]:
    parts, layout = [], []
    for kind in kinds:
        value = torch.as_tensor(scores[kind], dtype=torch.float64)
        parts.append(value.flatten())
        layout.append((kind, value.shape))
    return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64), layout


def scored_count(scores: Mapping[str, Any]) -> int:
    """Units with a finite score (the `n` that MIB's sizes are fractions of)."""
    return int(sum(int(torch.isfinite(torch.as_tensor(v, dtype=torch.float64)).sum()) for v in scores.values()))


def top_units(scores: Mapping[str, Any], count: int, absolute: bool = False) -> dict[str, torch.Tensor]:
    """Masks by kind keeping the `count` highest-scoring units (and every unscored one); 1 keeps a unit.

    `scores` maps kinds to tensors (`{"heads": [L, H], "mlps": [L]}`); NaN marks a unit without a score. Ties go to
    the unit first in MIB's node order (layer by layer, heads before the layer's MLP)."""
    kinds = list(scores)
    order_keys = _mib_order_keys(scores)
    flat, layout = _flat(scores, kinds)
    scored = torch.isfinite(flat)
    if count < 0 or count > int(scored.sum()):
        raise ValueError(f"a circuit of {count} units is asked for, but {int(scored.sum())} units have a score.")
    value = flat.abs() if absolute else flat.clone()
    value[~scored] = -torch.inf
    # Stable descending sort by score, ties in MIB's node order.
    position = torch.argsort(order_keys, stable=True)
    ranked = position[torch.argsort(-value[position], stable=True)]
    keep = torch.zeros_like(flat)
    keep[ranked[:count]] = 1.0
    keep[~scored] = 1.0
    masks, start = {}, 0
    for kind, shape in layout:
        size = int(torch.Size(shape).numel())
        masks[kind] = keep[start:start + size].reshape(shape).float()
        start += size
    return masks


def _mib_order_keys(scores: Mapping[str, Any]) -> torch.Tensor:
    """Position of every unit (flattened kind by kind) in MIB's node order: layer-major, a layer's heads first."""
    keys = []
    for kind, value in scores.items():
        value = torch.as_tensor(value)
        if value.dim() == 2:        # heads [L, H]
            layers, heads = value.shape
            key = torch.arange(layers).unsqueeze(1) * (heads + 1) + torch.arange(heads).unsqueeze(0)
            keys.append(key.flatten().double())
        elif value.dim() == 1:      # MLP blocks [L]: after the layer's heads
            other = next((torch.as_tensor(v) for v in scores.values() if torch.as_tensor(v).dim() == 2), None)
            heads = other.shape[1] if other is not None else 0
            keys.append((torch.arange(value.shape[0]) * (heads + 1) + heads).double())
        else:
            keys.append(torch.arange(value.numel()).double() + 1e9)
    return torch.cat(keys) if keys else torch.zeros(0)


def random_scores(shapes: Mapping[str, Sequence[int]], seed: int) -> dict[str, torch.Tensor]:
    """A random ranking (uniform scores) of units of the given shapes: the chance baseline of a curve."""
    generator = torch.Generator().manual_seed(int(seed))
    return {kind: torch.rand(tuple(shape), generator=generator, dtype=torch.float64) for kind, shape in shapes.items()}
