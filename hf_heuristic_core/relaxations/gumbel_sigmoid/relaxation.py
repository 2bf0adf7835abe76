"""Gumbel-sigmoid masks with a straight-through estimator (Csordás et al., *Are Neural Nets Modular?*).

    s = sigmoid((l - log(log U1 / log U2)) / tau),  U1, U2 ~ U(0, 1)   (the noise is logistic: drawn from one U)
    b = stopgrad(1[s > 0.5] - s) + s                                  (forward: hard 0/1; backward: d s / d l)
    P(b = 1) = sigmoid(l) for any tau                                 (tau only scales the gradient; Adam cancels it)
    penalty:  alpha * sum_i l_i                                       (on raw logits: constant gradient)
    eval:     M = 1[l > 0]                                            (threshold, never sample)

Defaults are the paper's: logits start at log(0.9 / 0.1) (keep probability 0.9; the released code uses 2, i.e.
0.881), tau = 1, and 4 mask samples per batch, one per batch chunk (`mask_samples`). The penalty on logits must not be
replaced by an L1 on sigmoid(l): that vanishes for confident logits and the paper's alpha values no longer apply.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..base import Relaxation
from .settings import GumbelSigmoidSettings

__all__ = ["GUMBEL_EPS", "GumbelSigmoid", "logistic_noise"]

GUMBEL_EPS = 1e-10


def logistic_noise(shape: torch.Size | tuple[int, ...], generator: torch.Generator | None, device: torch.device,
                   dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """-log(log U2 / log U1), the difference of two Gumbel variables, is standard logistic noise; it is drawn here
    as log U - log(1 - U) from one uniform (the same distribution at half the random numbers)."""
    u = torch.rand(shape, generator=generator, device=device, dtype=dtype).clamp_(GUMBEL_EPS, 1 - GUMBEL_EPS)
    return torch.log(u) - torch.log1p(-u)


class _StraightThrough(torch.autograd.Function):
    """Forward: 1[x > 0] (= 1[sigmoid(x / tau) > 0.5]); backward: the soft sample's derivative s (1 - s) / tau.
    One fused op: no soft-sample tensor kept besides s, no (hard - s).detach() + s arithmetic."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, tau: float) -> torch.Tensor:
        soft = torch.sigmoid(x / tau)
        ctx.save_for_backward(soft)
        ctx.tau = tau
        return (x > 0).to(x.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (soft,) = ctx.saved_tensors
        return grad * soft * (1 - soft) / ctx.tau, None


class GumbelSigmoid(Relaxation):
    """Straight-through Gumbel-sigmoid masks (see the module docstring)."""

    name = "gumbel_sigmoid"
    settings_class = GumbelSigmoidSettings
    paper_binarization = GumbelSigmoidSettings.paper_binarization
    # Csordás' released code divides the summed logits by the batch size.
    penalty_per_example = True

    def __init__(self, init_prob: float = 0.9, tau: float = 1.0) -> None:
        if not 0.0 < init_prob < 1.0:
            raise ValueError(f"gumbel_sigmoid: init_prob must be in (0, 1), got {init_prob}.")
        if not tau > 0:
            raise ValueError(f"gumbel_sigmoid: tau must be > 0 (the paper uses 1), got {tau}.")
        self.init_prob = float(init_prob)
        self.tau = float(tau)

    @classmethod
    def from_config(cls, config: Any) -> "GumbelSigmoid":
        settings = GumbelSigmoidSettings.from_config(config)
        return cls(settings.gumbel_init_prob, settings.gumbel_tau)

    @property
    def init_logit(self) -> float:
        return math.log(self.init_prob / (1.0 - self.init_prob))

    def init_logits(self, shape: tuple[int, ...], generator: torch.Generator | None = None) -> torch.Tensor:
        return torch.full(shape, self.init_logit, dtype=torch.float32)

    def soft_sample(self, logits: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """s, before the straight-through rounding."""
        noise = logistic_noise(logits.shape, generator, logits.device, torch.float32)
        return torch.sigmoid((logits + noise.to(logits.dtype)) / self.tau)

    def sample(self, logits: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """b = stopgrad(1[s > 0.5] - s) + s, computed as one straight-through op on the noisy logit."""
        noise = logistic_noise(logits.shape, generator, logits.device, torch.float32).to(logits.dtype)
        return _StraightThrough.apply(logits + noise, self.tau)

    def deterministic(self, logits: torch.Tensor) -> torch.Tensor:
        """The keep probability sigmoid(l) (the soft view; binary eval masks threshold it)."""
        return torch.sigmoid(logits)

    def prob_keep(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(logits)

    def penalty(self, logits: torch.Tensor) -> torch.Tensor:
        """sum_i l_i (multiplied by alpha, divided by the batch size, as in the released code)."""
        return logits.sum()

    def threshold_masks(self, logits: torch.Tensor, threshold: float) -> torch.Tensor:
        """1 where sigmoid(l) > threshold; at the default 0.5 this is the paper's 1[l > 0]."""
        cut = math.log(threshold / (1 - threshold))
        return (logits.detach().float().cpu() > cut).float()
