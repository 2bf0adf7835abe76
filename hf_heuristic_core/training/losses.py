"""The distillation loss of mask learning: KL(teacher || student), in fp32, per sequence or per real token."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..errors import PruningError

__all__ = ["kl_items", "kl_to_teacher"]


def kl_to_teacher(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                  attention_mask: torch.Tensor | None = None, temperature: float = 1.0,
                  reduction: str = "mean") -> torch.Tensor:
    """KL(teacher || student) in fp32.

    Sequence-level logits `[batch, classes]`: batchmean. Per-position logits `[batch, seq, vocab]` (causal LM,
    token classification): the mean over real (non-padding) positions (`reduction="sum"`: their sum, for a
    mean taken over a whole accumulated / distributed batch). Scaled by T^2 (a no-op at T = 1).
    """
    if student_logits.shape != teacher_logits.shape:
        raise PruningError(f"Teacher logits {tuple(teacher_logits.shape)} and student logits "
                           f"{tuple(student_logits.shape)} differ in shape.")
    student = F.log_softmax(student_logits.float() / temperature, dim=-1)
    teacher = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
    per_item = (teacher.exp() * (teacher - student)).sum(-1)
    if per_item.dim() == 1:
        return (per_item.sum() if reduction == "sum" else per_item.mean()) * temperature ** 2
    weights = (attention_mask.to(per_item.dtype) if attention_mask is not None and
               attention_mask.shape == per_item.shape else torch.ones_like(per_item))
    total = (per_item * weights).sum() * temperature ** 2
    return total if reduction == "sum" else total / weights.sum().clamp_min(1.0)


def kl_items(student_logits: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """How many items `kl_to_teacher` averages over: examples for `[batch, classes]` logits, real positions for
    `[batch, seq, vocab]` logits (the weight of this micro-batch's KL in a mean over a larger batch)."""
    if student_logits.dim() == 2:
        return torch.tensor(float(student_logits.shape[0]))
    if attention_mask is not None and tuple(attention_mask.shape) == tuple(student_logits.shape[:-1]):
        return attention_mask.detach().float().sum().clamp_min(1.0)
    return torch.tensor(float(student_logits.shape[:-1].numel()))
