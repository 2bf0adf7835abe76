"""`PruningArguments`: `TrainingArguments` plus the knobs of mask learning.

Defaults reproduce the recipe of *The Heuristic Core* (appendix B, checked against its released code): mask learning
rate 0.1, Lagrange-multiplier learning rate 1.0, 200 warm-up steps of the learning rate then linear decay, a target
sparsity that rises linearly from 0 over `6500 + 50 * target_percent` steps, the sampled-L0 penalty, KL with no
temperature, no dropout in the student, and an exact top-k binarization at the end (the paper's threshold rule is
available for reproduction). Weight decay is 0: torch's AdamW default of 0.01 would pull mask logits toward 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from transformers import TrainingArguments

SPARSITY_SCHEDULES = ("linear", "log")
SPARSITY_PENALTIES = ("sampled", "expected")
TEACHERS = ("same_model", "cached")
FINAL_BINARIZATIONS = ("topk", "threshold")


@dataclass
class PruningArguments(TrainingArguments):
    """Arguments of `PruningTrainer`; every field is also a flag of `hf-heuristic-core prune`."""

    target_sparsity: float = field(default=0.5, metadata={
        "help": "Fraction of enabled units (heads + MLP blocks, each counted once) to prune, in [0, 1)."})
    start_sparsity: float = field(default=0.0, metadata={"help": "Target sparsity at step 0 of the schedule."})
    sparsity_warmup_steps: int | None = field(default=None, metadata={
        "help": "Steps over which the target rises from start_sparsity to target_sparsity. Default: the paper's "
                "6500 + 50 * target_percent, capped at 90%% of the run (with a warning) when the run is shorter."})
    sparsity_schedule: str = field(default="linear", metadata={
        "help": "linear, or log: 1 - exp(log(1-s0) + (log(1-sT) - log(1-s0)) * step / warmup)."})
    mask_learning_rate: float = field(default=0.1, metadata={"help": "Learning rate of the mask logits (log_alpha)."})
    reg_learning_rate: float = field(default=1.0, metadata={
        "help": "Learning rate of the Lagrange multipliers (gradient ascent)."})
    sparsity_penalty: str = field(default="sampled", metadata={
        "help": "sampled: c = 1 - sum(z)/N from the sampled masks (the paper's code); expected: 1 - E[L0]/N (CoFi)."})
    teacher: str = field(default="same_model", metadata={
        "help": "same_model: the wrapped model with masks disabled, run every step (no second copy); cached: "
                "teacher logits computed once before training (the teacher is frozen)."})
    kl_temperature: float = field(default=1.0, metadata={"help": "Softmax temperature of the KL (the paper uses 1)."})
    keep_dropout: bool = field(default=False, metadata={
        "help": "Run the student with dropout. Off by default: a student with dropout cannot reach KL 0 against "
                "a teacher without it."})
    final_binarization: str = field(default="topk", metadata={
        "help": "topk: exactly round(target * N) units pruned; threshold: the paper's deterministic-then-threshold rule."})
    final_threshold: float = field(default=0.5, metadata={
        "help": "Threshold of the paper's rule (it used 0.5 at 50%% and 0.35 at 70%%)."})
    warmup_steps: float = field(default=200, metadata={
        "help": "Learning-rate warm-up steps for both parameter groups (the paper: 200), then linear decay."})
    remove_unused_columns: bool = field(default=True, metadata={
        "help": "Drop dataset columns the wrapped model's forward does not take."})

    def __post_init__(self) -> None:
        if self.ddp_find_unused_parameters is None:
            # The multipliers are used in the loss, outside forward: with DDP's unused-parameter search their
            # gradients would be marked ready twice. Every trainable tensor is used each step anyway.
            self.ddp_find_unused_parameters = False
        super().__post_init__()
        checks = [
            ("target_sparsity", 0.0 <= self.target_sparsity < 1.0,
             "must be a fraction in [0, 1) (pass 0.5 for 50%)"),
            ("start_sparsity", 0.0 <= self.start_sparsity < 1.0, "must be a fraction in [0, 1)"),
            ("sparsity_schedule", self.sparsity_schedule in SPARSITY_SCHEDULES, f"must be one of {SPARSITY_SCHEDULES}"),
            ("sparsity_penalty", self.sparsity_penalty in SPARSITY_PENALTIES, f"must be one of {SPARSITY_PENALTIES}"),
            ("teacher", self.teacher in TEACHERS, f"must be one of {TEACHERS}"),
            ("final_binarization", self.final_binarization in FINAL_BINARIZATIONS,
             f"must be one of {FINAL_BINARIZATIONS}"),
            ("mask_learning_rate", self.mask_learning_rate > 0, "must be > 0"),
            ("reg_learning_rate", self.reg_learning_rate > 0, "must be > 0"),
            ("kl_temperature", self.kl_temperature > 0, "must be > 0"),
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
