"""Mean activations for mean ablation: averaged over real (non-padding) tokens, accumulated in fp32.

The means are position-independent (one vector per head and per MLP block), computed on the very checkpoint being
pruned, with the full model (masks off). A fingerprint of the token ids records which data they came from.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, Mapping

import torch


@dataclass
class MeanStatistics:
    """Running fp32 sums and the token count; divided at the end."""

    head_sums: torch.Tensor
    mlp_sums: torch.Tensor
    token_count: int = 0
    hasher: Any = field(default_factory=hashlib.sha256)

    def means(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.token_count == 0:
            raise ValueError("compute_means saw no real tokens (every attention_mask entry was 0, or the data was "
                             "empty); pass batches with input_ids and a non-empty attention_mask.")
        return self.head_sums / self.token_count, self.mlp_sums / self.token_count


def token_mask_for(x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """The 0/1 weights of `x`'s positions, matched to its leading dims; None means every position is real."""
    if attention_mask is None or attention_mask.dim() != 2:
        return None
    leading = x.shape[:-1]
    if tuple(attention_mask.shape) == tuple(leading):
        return attention_mask
    if attention_mask.numel() == leading.numel():
        return attention_mask.reshape(leading)
    return None


def weighted_sum(x: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """Sum of `x` over every leading dim in fp32, counting only positions whose weight is 1."""
    x = x.detach().float()
    if weights is not None:
        x = x * weights.to(device=x.device, dtype=x.dtype).unsqueeze(-1)
    return x.reshape(-1, x.shape[-1]).sum(0)


def update_fingerprint(hasher, batch: Mapping[str, torch.Tensor]) -> None:
    for key in ("input_ids", "attention_mask"):
        value = batch.get(key)
        if isinstance(value, torch.Tensor):
            hasher.update(key.encode())
            hasher.update(value.detach().to("cpu", torch.int64).contiguous().numpy().tobytes())
