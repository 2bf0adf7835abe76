"""`PruningArguments`: `TrainingArguments` plus the knobs of mask learning.

`recipe` decides the settings left unset. "paper" is the recipe of *The Heuristic Core* (appendix B, checked against
its released code): mask learning rate 0.1, Lagrange-multiplier learning rate 1.0, 200 warm-up steps of the learning
rate then linear decay, a target sparsity that rises linearly from 0 over `6500 + 50 * target_percent` steps, the
sampled-L0 penalty, KL with no temperature, no dropout in the student, and an exact top-k binarization at the end (the
paper's threshold rule is available for reproduction). It needs its ~9000 steps: in a run of a few hundred it barely
moves the masks. "short" (`training.recipes`) converges in a few hundred steps. "auto", the default, takes "paper"
when the run is long enough for the paper's schedule and "short" otherwise. Weight decay is 0: torch's AdamW default
of 0.01 would pull mask logits toward 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from transformers import TrainingArguments

from .fields import (
    CACHE_DTYPES,
    FINAL_BINARIZATIONS,
    RECIPE_NAMES,
    SPARSITY_PENALTIES,
    SPARSITY_SCHEDULES,
    TEACHER_LOGITS_DTYPES,
    TEACHERS,
    PruningFields,
)

__all__ = ["FINAL_BINARIZATIONS", "RECIPE_NAMES", "SPARSITY_PENALTIES", "SPARSITY_SCHEDULES", "TEACHERS",
           "PruningArguments"]


@dataclass
class PruningArguments(PruningFields, TrainingArguments):
    """Arguments of `PruningTrainer`; every field is also a flag of `hf-heuristic-core prune` (the mask-learning
    fields are `training.fields.PruningFields`)."""

    def __post_init__(self) -> None:
        if self.ddp_find_unused_parameters is None:
            # The multipliers are used in the loss, outside forward: with DDP's unused-parameter search their
            # gradients would be marked ready twice. Every trainable tensor is used each step anyway.
            self.ddp_find_unused_parameters = False
        super().__post_init__()
        checks = [
            ("recipe", self.recipe in RECIPE_NAMES, f"must be one of {RECIPE_NAMES}"),
            ("target_sparsity", 0.0 <= self.target_sparsity < 1.0,
             "must be a fraction in [0, 1) (pass 0.5 for 50%)"),
            ("start_sparsity", 0.0 <= self.start_sparsity < 1.0, "must be a fraction in [0, 1)"),
            ("sparsity_schedule", self.sparsity_schedule in SPARSITY_SCHEDULES, f"must be one of {SPARSITY_SCHEDULES}"),
            ("sparsity_penalty", self.sparsity_penalty in (None, *SPARSITY_PENALTIES),
             f"must be one of {SPARSITY_PENALTIES}"),
            ("teacher", self.teacher in TEACHERS, f"must be one of {TEACHERS}"),
            ("final_binarization", self.final_binarization in FINAL_BINARIZATIONS,
             f"must be one of {FINAL_BINARIZATIONS}"),
            ("mask_learning_rate", self.mask_learning_rate > 0, "must be > 0"),
            ("reg_learning_rate", self.reg_learning_rate is None or self.reg_learning_rate > 0, "must be > 0"),
            ("teacher_cache_dtype", self.teacher_cache_dtype in CACHE_DTYPES, f"must be one of {CACHE_DTYPES}"),
            ("teacher_cache_topk", self.teacher_cache_topk >= 1, "must be >= 1"),
            ("teacher_cache_max_gb", self.teacher_cache_max_gb >= 0, "must be >= 0"),
            ("objective", self.objective in ("kl", "task", "task+kl"), "must be one of ('kl', 'task', 'task+kl')"),
            ("sparsity_control", self.sparsity_control in ("lagrangian", "penalty"),
             "must be one of ('lagrangian', 'penalty')"),
            ("penalty_weight", self.penalty_weight is None or self.penalty_weight >= 0, "must be >= 0"),
            ("convergence_subnetworks", self.convergence_subnetworks >= 1, "must be >= 1"),
            ("convergence_batches", self.convergence_batches >= 1, "must be >= 1"),
            ("kl_temperature", self.kl_temperature > 0, "must be > 0"),
            ("teacher_logits_dtype", self.teacher_logits_dtype in TEACHER_LOGITS_DTYPES,
             f"must be one of {TEACHER_LOGITS_DTYPES}"),
            ("kl_chunk_size", self.kl_chunk_size is None or self.kl_chunk_size >= 1,
             "must be >= 1 (rows per chunk), or unset to compute the KL at once"),
            ("final_threshold", 0.0 < self.final_threshold < 1.0, "must be in (0, 1)"),
            ("sparsity_warmup_steps", self.sparsity_warmup_steps is None or self.sparsity_warmup_steps >= 0,
             "must be >= 0"),
        ]
        for name, ok, message in checks:
            if not ok:
                raise ValueError(f"PruningArguments.{name}={getattr(self, name)!r} {message}.")

    def paper_sparsity_warmup(self) -> int:
        """The paper's schedule length: 6500 + 50 * target sparsity in percent (9000 steps at 50%)."""
        return int(6500 + 50 * round(100 * self.target_sparsity))

    def target_at(self, step: int, warmup: int) -> float:
        """The target sparsity t at `step` of a schedule `warmup` steps long."""
        progress = 1.0 if warmup <= 0 else min(1.0, step / warmup)
        start, end = self.start_sparsity, self.target_sparsity
        if self.sparsity_schedule == "linear":
            return start + (end - start) * progress
        return 1 - math.exp(math.log(1 - start) + (math.log(1 - end) - math.log(1 - start)) * progress)
