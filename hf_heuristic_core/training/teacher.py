"""The cached teacher: the full model's logits computed once per training example, looked up by example index."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..errors import PruningError

__all__ = ["TeacherCache"]


@dataclass
class TeacherCache:
    """Teacher logits per training example (index = position in the training dataset).

    Per-position logits keep only the real tokens, so any padding layout can be rebuilt at lookup.
    """

    logits: list[torch.Tensor]
    per_position: bool

    def lookup(self, indices: torch.Tensor, like: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
        out = torch.zeros_like(like, dtype=torch.float32)
        for row, index in enumerate(indices.tolist()):
            if not 0 <= index < len(self.logits):
                raise PruningError(f"Mismatched teacher cache: example index {index} is outside the cache "
                                   f"({len(self.logits)} entries). The training data changed since the cache was "
                                   "built; rebuild it or use teacher='same_model'.")
            cached = self.logits[index].to(out.device)
            if not self.per_position:
                if cached.shape != out[row].shape:
                    raise PruningError(f"Mismatched teacher cache entry for example {index}: cached logits "
                                       f"{tuple(cached.shape)}, model gives {tuple(out[row].shape)}. Rebuild the "
                                       "cache for this model or use teacher='same_model'.")
                out[row] = cached
                continue
            positions = (attention_mask[row].bool() if attention_mask is not None
                         else torch.ones(out.shape[1], dtype=torch.bool, device=out.device))
            if cached.shape != (int(positions.sum()), out.shape[-1]):
                raise PruningError(f"Mismatched teacher cache entry for example {index}: cached "
                                   f"{tuple(cached.shape)} (positions, vocab), batch has {int(positions.sum())} real "
                                   f"positions and {out.shape[-1]} outputs. The data or tokenization changed since "
                                   "the cache was built; rebuild it or use teacher='same_model'.")
            out[row, positions] = cached
        return out
