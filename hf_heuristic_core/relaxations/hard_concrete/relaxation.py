"""Hard-concrete masks (Louizos et al. 2018), exactly as used by CoFi and *The Heuristic Core*.

    u ~ U(eps, 1 - eps)
    s = sigmoid((log u - log(1 - u) + log_alpha) / beta)
    z = clamp(s * (r - l) + l, 0, 1)
    P(z != 0) = sigmoid(log_alpha - beta * log(-l / r))

The learned parameters live in fp32 whatever the model's dtype: at `log_alpha = 10` bf16 has a spacing of 0.0625,
so the small updates pruning relies on would vanish. `log_alpha` starts from N(init_mean, init_std): N(10, 0.01) in
the paper, every unit on.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..base import Relaxation
from .settings import HardConcreteSettings
from ..binarize import check_sparsity, smallest_indices, topk_binarize  # noqa: F401 (re-exported)

# The CoFi deterministic rule scales log_alpha by this before the sigmoid (released code's "magical number").
COFI_SOFT_MASK_SCALE = 0.8

__all__ = ["COFI_SOFT_MASK_SCALE", "HardConcrete"]


class HardConcrete(Relaxation):
    """The distribution's constants and its views of a unit: a sample, the test-time value, and P(z != 0)."""

    name = "hard_concrete"
    settings_class = HardConcreteSettings

    def __init__(self, temperature: float = 2 / 3, limit_left: float = -0.1, limit_right: float = 1.1,
                 eps: float = 1e-6, init_mean: float = 10.0, init_std: float = 0.01) -> None:
        self.temperature = temperature
        self.limit_left = limit_left
        self.limit_right = limit_right
        self.eps = eps
        self.init_mean = init_mean
        self.init_std = init_std

    @classmethod
    def from_config(cls, config: Any) -> "HardConcrete":
        settings = HardConcreteSettings.from_config(config)
        return cls(settings.temperature, settings.limit_left, settings.limit_right, settings.eps, settings.init_mean,
                   settings.init_std)

    def init_logits(self, shape: tuple[int, ...], generator: torch.Generator | None = None) -> torch.Tensor:
        return torch.empty(shape, dtype=torch.float32).normal_(self.init_mean, self.init_std, generator=generator)

    def sample(self, log_alpha: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """A reparameterized sample; noise is drawn on log_alpha's own device (no host-to-device copy per call)."""
        u = torch.rand(log_alpha.shape, generator=generator, device=log_alpha.device, dtype=log_alpha.dtype)
        u = u * (1 - 2 * self.eps) + self.eps
        s = torch.sigmoid((torch.log(u) - torch.log1p(-u) + log_alpha) / self.temperature)
        return self._stretch_and_clip(s)

    def deterministic(self, log_alpha: torch.Tensor) -> torch.Tensor:
        """Louizos' test-time estimator: the noise-free value of z."""
        return self._stretch_and_clip(torch.sigmoid(log_alpha))

    def prob_nonzero(self, log_alpha: torch.Tensor) -> torch.Tensor:
        """Expected L0 of each unit, P(z != 0)."""
        shift = self.temperature * math.log(-self.limit_left / self.limit_right)
        return torch.sigmoid(log_alpha - shift)

    def prob_keep(self, log_alpha: torch.Tensor) -> torch.Tensor:
        return self.prob_nonzero(log_alpha)

    def _stretch_and_clip(self, s: torch.Tensor) -> torch.Tensor:
        return (s * (self.limit_right - self.limit_left) + self.limit_left).clamp(0.0, 1.0)

    def cofi_soft_mask(self, log_alpha: torch.Tensor) -> torch.Tensor:
        """The released code's eval mask for one mask tensor: the k = round(sum P(z = 0)) units with the
        smallest log_alpha get 0, the others keep sigmoid(0.8 * log_alpha / beta)."""
        flat = log_alpha.detach().flatten()
        expected_zeros = int(round(float((1 - self.prob_nonzero(flat)).sum())))
        soft = torch.sigmoid(COFI_SOFT_MASK_SCALE * flat / self.temperature)
        if expected_zeros > 0:
            soft[smallest_indices(flat, expected_zeros)] = 0.0
        return soft.view_as(log_alpha)

    def threshold_masks(self, log_alpha: torch.Tensor, threshold: float) -> torch.Tensor:
        """The paper's rule: the CoFi soft mask, then 1 where it exceeds `threshold` (0.5 at 50%, 0.35 at 70%)."""
        return (self.cofi_soft_mask(log_alpha.detach().float().cpu()) > threshold).float()
