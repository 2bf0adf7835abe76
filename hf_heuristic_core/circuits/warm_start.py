"""Warm start: initialize mask logits from unit scores (attribution, or any ranking) instead of all alike.

The logits are set by rank, not by the scores' values, so any score scale works (attribution patching, integrated
gradients, another run's logits):

    log_alpha_u = center + spread * (2 * r_u - 1),    r_u = rank of u / (n - 1) in [0, 1], 1 = highest score

`center` is the relaxation's `init_mean` (the recipe's: 3 for the short recipe, 10 for the paper's) and `spread`
(`PruningArguments.warm_start_spread`) how far the best and the worst unit start from it. The enabled units are ranked
together, as global top-k binarization ranks them; units without a score (NaN) start at `center`, and forced units
stay pinned. The hard-concrete keep probability is monotone in `log_alpha`, so the warm-started masks start with the
ranking of the scores and the Lagrangian schedule removes the lowest-ranked units first.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import torch

from ..errors import PruningError
from .sources import load_unit_scores

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_SPREAD", "warm_start_from_file", "warm_start_logits"]

DEFAULT_SPREAD = 3.0


def warm_start_logits(prunable: Any, scores: Mapping[str, Any], spread: float = DEFAULT_SPREAD,
                      center: float | None = None) -> dict[str, Any]:
    """Set the mask logits of `prunable`'s enabled kinds from `scores` (see the module docstring); returns a short
    summary (center, spread, units ranked, the rank correlation it starts from)."""
    if not (isinstance(spread, (int, float)) and spread >= 0 and torch.isfinite(torch.tensor(float(spread)))):
        raise PruningError(f"warm_start_spread must be a finite number >= 0, got {spread!r}.")
    if "init_mean" not in prunable.pruning_config.relaxation_settings.field_names():   # logits with no center
        raise PruningError(f"Warm start sets hard-concrete logits around init_mean; this model uses the "
                           f"{prunable.pruning_config.relaxation!r} relaxation. Use relaxation='hard_concrete'.")
    center = float(prunable.pruning_config.init_mean if center is None else center)
    kinds = prunable.enabled_kinds()
    shapes = prunable.mask_shapes()
    flat = []
    for kind in kinds:
        if kind not in scores or scores[kind] is None:
            raise PruningError(f"Warm start: no scores for the pruned kind {kind!r} (scores given for "
                               f"{sorted(k for k in scores if scores[k] is not None)}).")
        value = torch.as_tensor(scores[kind], dtype=torch.float64).detach().cpu()
        if tuple(value.shape) != tuple(shapes[kind]):
            raise PruningError(f"Warm start: {kind} scores have shape {tuple(value.shape)}, this model needs "
                               f"{list(shapes[kind])}.")
        flat.append(value.flatten())
    values = torch.cat(flat)
    scored = torch.isfinite(values)
    count = int(scored.sum())
    if count == 0:
        raise PruningError("Warm start: every score is NaN; there is no ranking to start from.")
    logits = torch.full_like(values, center)
    if count > 1:
        order = torch.argsort(values[scored], stable=True)   # ascending: rank 0 = lowest score
        ranks = torch.empty(count, dtype=torch.float64)
        ranks[order] = torch.arange(count, dtype=torch.float64) / (count - 1)
        logits[scored] = center + spread * (2 * ranks - 1)
    else:
        logits[scored] = center + spread
    start = 0
    with torch.no_grad():
        for kind in kinds:
            parameter = prunable.mask_logits[kind]
            size = parameter.numel()
            parameter.copy_(logits[start:start + size].view(parameter.shape).to(parameter.dtype))
            start += size
    prunable.apply_forced()
    prunable.mask_state.mark_initialized()   # set on purpose: a trainer must not re-initialize them
    prunable.forget_eval_masks()
    return {"center": center, "spread": float(spread), "units_ranked": count, "units": int(values.numel())}


def warm_start_from_file(prunable: Any, source: str | os.PathLike, spread: float = DEFAULT_SPREAD) -> dict[str, Any]:
    """`warm_start_logits` with the scores of a MIB importance file or a mask artifact (`sources.load_unit_scores`)."""
    # An edge-level file maps its MIB edge names onto the edge graph of a model wrapped with edge masks.
    scores = load_unit_scores(source, prunable.mask_shapes(), getattr(prunable.granularity, "graph", None))
    summary = {"source": str(source), **warm_start_logits(prunable, scores, spread)}
    logger.info("Warm start: mask logits of %d units set from the ranking in %s (center %.3g, spread %.3g).",
                summary["units_ranked"], source, summary["center"], summary["spread"])
    return summary
