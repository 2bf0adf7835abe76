"""Node attribution patching and its integrated-gradients variant, through the package's own mask hooks.

Every head and MLP block already passes through `x' = x - (1 - z) (x - r)` (`ablation.apply`), where `r` is what
ablation puts in its place (mean, zero, or another example's activation). With the masks `z` held as tensors that
require gradients, one backward pass gives `dm/dz` for every unit at once, and at `z = 1`

    dm/dz_u = <dm/dx'_u, x_u - r_u>        (summed over positions and the unit's output dimensions)

which is exactly node attribution patching: the gradient of the metric times the activation difference between
the clean and the ablated value (MIB's node-level `EAP`, `EAP-IG/src/eap/attribute_node.py`, `get_scores_eap`). It is
the first-order estimate of `m(full) - m(full without u)`: positive scores mark units whose ablation lowers `m`.

The integrated-gradients variant averages `dm/dz` along the straight path from the fully ablated model to the full
one, `z = (k / steps) * 1` for `k = 1 .. steps` (the right Riemann sum MIB uses for its IG steps). Because the path
is in mask space, the scores add up to `m(full) - m(empty)` as `steps` grows (completeness), and each unit's share is
measured with the other units partly present, which is where the first-order estimate is weakest.

Costs: one forward and one backward pass per batch (`steps` of each for IG); gradients are taken with respect to the
masks only (`torch.autograd.grad`), so nothing accumulates on the model's parameters.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import PruningError
from .batches import MetricBatch, metric_batches
from .metrics import Metric, logit_difference

__all__ = ["ATTRIBUTION_METHODS", "AttributionResult", "attribution_scores", "differentiable_masks"]

ATTRIBUTION_METHODS = ("patching", "integrated_gradients")


@dataclass
class AttributionResult:
    """Scores by kind (`{"heads": [L, H], "mlps": [L]}`, higher = more important) and how they were made."""

    scores: dict[str, torch.Tensor]
    method: str
    ablation: str
    steps: int
    examples: int
    forward_backward_passes: int
    seconds: float
    extra: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> dict[str, Any]:
        return {"method": self.method, "ablation": self.ablation, "steps": self.steps, "examples": self.examples,
                "forward_backward_passes": self.forward_backward_passes, "seconds": self.seconds, **self.extra}


@contextlib.contextmanager
def differentiable_masks(prunable: Any, masks: Mapping[str, torch.Tensor]) -> Iterator[dict[str, torch.Tensor]]:
    """Fix masks that require gradients (checked like `set_masks`), so the hooks' output is differentiable in them;
    the previous fixed masks come back afterwards. Yields the leaf tensors whose `.grad` the caller reads."""
    validated = prunable.validate_masks(masks)   # fresh fp32 copies on the masks' device
    leaves = {kind: tensor.requires_grad_(True) for kind, tensor in validated.items()}
    previous = prunable.mask_state.fixed.as_dict()
    prunable.mask_state.set_fixed(leaves)
    try:
        yield leaves
    finally:
        prunable.mask_state.set_fixed(previous)
        prunable.forget_eval_masks()


def attribution_scores(prunable: Any, data: Any, *, method: str = "patching", steps: int = 5,
                       ablation: str | None = None, metric: Metric = logit_difference, batch_size: int = 32,
                       collate_fn: Any = None, batches: list[MetricBatch] | None = None) -> AttributionResult:
    """Score every head and MLP block by attribution patching (`method="patching"`) or integrated gradients
    (`"integrated_gradients"`, `steps` points on the path), averaged over the examples of `data`.

    `ablation` (default: the model's) decides the reference activation; mean ablation needs the model's means.
    """
    if method not in ATTRIBUTION_METHODS:
        raise PruningError(f"Unknown attribution method {method!r}; choose one of {ATTRIBUTION_METHODS}.")
    if method == "integrated_gradients" and steps < 1:
        raise PruningError(f"Integrated gradients needs steps >= 1, got {steps}.")
    mode = ablation or prunable.pruning_config.ablation
    alphas = [1.0] if method == "patching" else [k / steps for k in range(1, steps + 1)]
    start = time.perf_counter()
    batches = batches if batches is not None else metric_batches(prunable, data, batch_size, collate_fn)
    shapes = prunable.mask_shapes()
    totals = {kind: torch.zeros(tuple(shape), dtype=torch.float64) for kind, shape in shapes.items()}
    examples = passes = 0
    was_training = prunable.training
    prunable.eval()
    try:
        with prunable.using_ablation(mode), torch.enable_grad():
            for batch in batches:
                examples += batch.size
                for alpha in alphas:
                    masks = {kind: torch.full(tuple(shape), alpha) for kind, shape in shapes.items()}
                    with differentiable_masks(prunable, masks) as leaves:
                        values = metric(prunable(**batch.inputs).logits, batch.fields)
                        kinds = list(leaves)
                        # autograd.grad, not backward: no gradient lands on the model's own parameters.
                        grads = torch.autograd.grad(values.sum(), [leaves[k] for k in kinds], allow_unused=True)
                        passes += 1
                        for kind, grad in zip(kinds, grads):
                            if grad is not None:
                                totals[kind] += grad.detach().double().cpu()
    finally:
        prunable.train(was_training)
    scores = {kind: total / (examples * len(alphas)) for kind, total in totals.items()}
    return AttributionResult(scores, method, mode, len(alphas), examples, passes, time.perf_counter() - start)
