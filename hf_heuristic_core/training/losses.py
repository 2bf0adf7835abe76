"""The distillation loss of mask learning, `hf_heuristic_core.losses` under its older path (evaluation measures the
same KL and sits below `training/`, so the module moved down; this path keeps working)."""

from __future__ import annotations

from ..losses import ChunkedKL, kl_items, kl_to_teacher

__all__ = ["ChunkedKL", "kl_items", "kl_to_teacher"]
