"""What replaces a masked value: zero, the mean activation, or another example's activation (resample).

Each mode is a small object with one method, `reference`, called by the hooks for the masked slice of one layer's
activation; the arithmetic that mixes it in is in `ablation.apply`.
"""

from __future__ import annotations

from typing import Any, ClassVar, Mapping

import torch

from ..errors import MissingMeansError
from .apply import resample_reference

__all__ = ["ABLATIONS", "Ablation", "MeanAblation", "ResampleAblation", "ZeroAblation"]


class Ablation:
    """Base class: `reference(...)` is what a masked value moves toward (None means zero)."""

    name: ClassVar[str] = ""
    needs_means: ClassVar[bool] = False

    def reference(self, kind: str, layer: int, x: torch.Tensor, means: Mapping[str, torch.Tensor],
                  batch_size: int | None) -> torch.Tensor | None:
        raise NotImplementedError


class ZeroAblation(Ablation):
    name = "zero"

    def reference(self, kind: str, layer: int, x: torch.Tensor, means: Mapping[str, torch.Tensor],
                  batch_size: int | None) -> torch.Tensor | None:
        return None


class MeanAblation(Ablation):
    """The paper's ablation: the unit's mean activation over real tokens of the training data."""

    name = "mean"
    needs_means = True

    def reference(self, kind: str, layer: int, x: torch.Tensor, means: Mapping[str, torch.Tensor],
                  batch_size: int | None) -> torch.Tensor | None:
        mean = means.get(kind)
        if mean is None:
            raise MissingMeansError(f"Mean ablation of {kind!r} needs its mean activations; call "
                                    "compute_means(train_data) first.")
        return mean[layer]


class ResampleAblation(Ablation):
    """Another example's activation (example i takes example i - 1's), as in resample ablation / causal scrubbing."""

    name = "resample"

    def reference(self, kind: str, layer: int, x: torch.Tensor, means: Mapping[str, torch.Tensor],
                  batch_size: int | None) -> torch.Tensor | None:
        return resample_reference(x, batch_size)


ABLATIONS: dict[str, Any] = {mode.name: mode() for mode in (MeanAblation, ZeroAblation, ResampleAblation)}
