"""The Lagrange multipliers of the sparsity constraint, owned by the trainer (they are training state, not masks).

loss = KL + lambda1 (t - c) + lambda2 (t - c)^2, with t the target and c the current sparsity. Both multipliers start
at 0 and are trained by gradient *ascent* (AdamW with `maximize=True`, as in the Heuristic Core's released code);
since (t - c)^2 >= 0, lambda2 only grows.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["LagrangeMultipliers"]


class LagrangeMultipliers(nn.Module):
    """lambda1 and lambda2 of the sparsity constraint, fp32 scalars starting at 0."""

    def __init__(self) -> None:
        super().__init__()
        self.lambda_1 = nn.Parameter(torch.zeros((), dtype=torch.float32))
        self.lambda_2 = nn.Parameter(torch.zeros((), dtype=torch.float32))

    def penalty(self, gap: torch.Tensor) -> torch.Tensor:
        """lambda1 * gap + lambda2 * gap^2 for gap = target - current sparsity."""
        return self.lambda_1 * gap + self.lambda_2 * gap ** 2
