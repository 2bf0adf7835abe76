"""The distillation loss of mask learning: KL(teacher || student), in fp32, per sequence or per real token.

Per-token logits are large (batch x length x vocabulary: 500 MB in fp32 for 32 x 128 tokens of a 30k vocabulary), and
the plain computation keeps several such tensors alive until backward (both log-softmaxes, the teacher's
probabilities, their product). `chunk_size` computes the same KL a block of positions at a time with its own
backward (`ChunkedKL`): it keeps only the two logits tensors and recomputes each block's softmaxes in backward, so the
KL adds at most a few blocks of `chunk_size x vocabulary` values. The result equals the plain computation up to the
order of fp32 additions.

A top-level module (not under `training/`): evaluation measures the same KL, and sits below the training package.
`hf_heuristic_core.training.losses` re-exports it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .errors import PruningError

__all__ = ["ChunkedKL", "kl_items", "kl_to_teacher"]


def kl_to_teacher(student_logits: torch.Tensor, teacher_logits: torch.Tensor,
                  attention_mask: torch.Tensor | None = None, temperature: float = 1.0,
                  reduction: str = "mean", chunk_size: int | None = None) -> torch.Tensor:
    """KL(teacher || student) in fp32.

    Sequence-level logits `[batch, classes]`: batchmean. Per-position logits `[batch, seq, vocab]` (causal LM,
    token classification): the mean over real (non-padding) positions (`reduction="sum"`: their sum, for a
    mean taken over a whole accumulated / distributed batch). Scaled by T^2 (a no-op at T = 1). `chunk_size`:
    compute it `chunk_size` rows (examples or positions) at a time, with far less memory (module docstring).
    """
    if student_logits.shape != teacher_logits.shape:
        raise PruningError(f"Teacher logits {tuple(teacher_logits.shape)} and student logits "
                           f"{tuple(student_logits.shape)} differ in shape.")
    if chunk_size is not None and chunk_size < 1:
        raise PruningError(f"kl chunk_size must be >= 1 (rows per chunk) or None, got {chunk_size}.")
    weights = _position_weights(student_logits, attention_mask)
    if chunk_size:
        width = student_logits.shape[-1]
        total = ChunkedKL.apply(student_logits.reshape(-1, width), teacher_logits.reshape(-1, width),
                                weights.reshape(-1), float(temperature), int(chunk_size))
    else:
        student = F.log_softmax(student_logits.float() / temperature, dim=-1)
        teacher = F.log_softmax(teacher_logits.float() / temperature, dim=-1)
        per_item = (teacher.exp() * (teacher - student)).sum(-1)
        total = (per_item * weights).sum() * temperature ** 2
    return total if reduction == "sum" else total / weights.sum().clamp_min(1.0)


def _position_weights(student_logits: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """1 per example (sequence-level logits) or per real position (per-position logits), 0 for padding."""
    rows = student_logits.shape[:-1]
    if student_logits.dim() > 2 and attention_mask is not None and tuple(attention_mask.shape) == tuple(rows):
        return attention_mask.to(device=student_logits.device, dtype=torch.float32)
    return torch.ones(rows, device=student_logits.device, dtype=torch.float32)


class ChunkedKL(torch.autograd.Function):
    """sum_i w_i KL(softmax(t_i / T) || softmax(s_i / T)) * T^2 over rows i, a chunk of rows at a time.

    Backward: d/ds_i = T w_i (softmax(s_i / T) - softmax(t_i / T)), recomputed per chunk; the teacher gets no
    gradient. Saves only the inputs (no copies), whatever their dtype (bf16 teacher logits stay bf16)."""

    @staticmethod
    def forward(ctx, student: torch.Tensor, teacher: torch.Tensor, weights: torch.Tensor, temperature: float,
                chunk_size: int) -> torch.Tensor:
        ctx.save_for_backward(student, teacher, weights)
        ctx.temperature, ctx.chunk_size = temperature, chunk_size
        total = torch.zeros((), device=student.device, dtype=torch.float32)
        for start in range(0, student.shape[0], chunk_size):
            rows = slice(start, start + chunk_size)
            log_q = F.log_softmax(student[rows].float() / temperature, dim=-1)
            log_p = F.log_softmax(teacher[rows].float() / temperature, dim=-1)
            total = total + (weights[rows] * (log_p.exp() * (log_p - log_q)).sum(-1)).sum()
        return total * temperature ** 2

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        student, teacher, weights = ctx.saved_tensors
        temperature, chunk_size = ctx.temperature, ctx.chunk_size
        grad = torch.empty_like(student)
        scale = grad_output.float() * temperature
        for start in range(0, student.shape[0], chunk_size):
            rows = slice(start, start + chunk_size)
            q = F.softmax(student[rows].float() / temperature, dim=-1)
            p = F.softmax(teacher[rows].float() / temperature, dim=-1)
            grad[rows] = ((q - p) * (weights[rows] * scale).unsqueeze(-1)).to(grad.dtype)
        return grad, None, None, None, None


def kl_items(student_logits: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """How many items `kl_to_teacher` averages over: examples for `[batch, classes]` logits, real positions for
    `[batch, seq, vocab]` logits (the weight of this micro-batch's KL in a mean over a larger batch)."""
    if student_logits.dim() == 2:
        return torch.tensor(float(student_logits.shape[0]))
    if attention_mask is not None and tuple(attention_mask.shape) == tuple(student_logits.shape[:-1]):
        return attention_mask.detach().float().sum().clamp_min(1.0)
    return torch.tensor(float(student_logits.shape[:-1].numel()))
