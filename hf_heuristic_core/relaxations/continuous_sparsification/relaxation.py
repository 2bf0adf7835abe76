"""Continuous sparsification (Savarese et al. 2020), as used by Lepori et al. (*Break It Down*) and Zhang et al.

    training:  m = sigmoid(beta * s)          (no noise)
    eval:      m = 1[s > 0]                   (Lepori's code; never the soft sigmoid(beta_max * s))
    penalty:   lambda * sum_i sigmoid(beta * s_i)   (called "L0"; the L1 of the soft mask over every entry)
    schedule:  beta starts at 1 and is multiplied at the end of every *epoch* by beta_max ** (1 / E)

Defaults are Lepori's: beta_max = 200, lambda = 1e-8, s initialized to a constant (he searched {0.1, 0.05, 0, -0.05};
0 is the default here; Zhang uses s = -0.1 and beta_max = 100). Multiplying per step instead of per epoch would reach
beta_max within the first epoch, so the schedule is an epoch-end callback (`schedule.BetaSchedule`).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ..base import Relaxation
from .beta import beta_after_epochs
from .settings import LEPORI_BETA_MAX, LEPORI_LAMBDA, ContinuousSparsificationSettings

__all__ = ["ContinuousSparsification", "LEPORI_BETA_MAX", "LEPORI_LAMBDA", "beta_after_epochs"]


class ContinuousSparsification(Relaxation):
    """sigmoid(beta * s) masks with a deterministic training mask (see the module docstring)."""

    name = "continuous_sparsification"
    settings_class = ContinuousSparsificationSettings
    paper_binarization = ContinuousSparsificationSettings.paper_binarization
    # The logit that pins an entry: sigmoid(beta * 10) is 1 - 5e-5 already at beta = 1.
    pinned_logit = 10.0

    def __init__(self, beta: float = 1.0, init: float = 0.0, beta_max: float = LEPORI_BETA_MAX) -> None:
        if not (beta > 0 and math.isfinite(beta)):
            raise ValueError(f"continuous sparsification: beta must be finite and > 0, got {beta}.")
        self.beta = float(beta)
        self.init = float(init)
        self.beta_max = float(beta_max)

    @classmethod
    def from_config(cls, config: Any) -> "ContinuousSparsification":
        settings = ContinuousSparsificationSettings.from_config(config)
        return cls(settings.cs_beta, settings.cs_init, settings.cs_beta_max)

    def training_callbacks(self, prunable: Any) -> list[Any]:
        """The epoch-end beta schedule; imported here because it is a `transformers.TrainerCallback` and a
        relaxation is also used without a trainer."""
        from .schedule import BetaSchedule  # lazy: schedule.py imports transformers
        return [BetaSchedule(prunable)]

    def init_logits(self, shape: tuple[int, ...], generator: torch.Generator | None = None) -> torch.Tensor:
        return torch.full(shape, self.init, dtype=torch.float32)

    def sample(self, logits: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """The training mask: deterministic, sigmoid(beta * s)."""
        return torch.sigmoid(self.beta * logits)

    def deterministic(self, logits: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.beta * logits)

    def prob_keep(self, logits: torch.Tensor) -> torch.Tensor:
        """The soft mask itself: what Lepori's and NeuroSurgeon's "L0" sums."""
        return torch.sigmoid(self.beta * logits)

    def penalty(self, logits: torch.Tensor) -> torch.Tensor:
        """sum_i sigmoid(beta * s_i): multiplied by lambda in the loss."""
        return torch.sigmoid(self.beta * logits).sum()

    def threshold_masks(self, logits: torch.Tensor, threshold: float) -> torch.Tensor:
        """1 where sigmoid(beta * s) > threshold; at the default 0.5 this is the paper's 1[s > 0] for any beta."""
        cut = math.log(threshold / (1 - threshold)) / self.beta
        return (logits.detach().float().cpu() > cut).float()
