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
from dataclasses import dataclass, field

from transformers import TrainingArguments

from .teacher import CACHE_DTYPES

RECIPE_NAMES = ("auto", "paper", "short")
SPARSITY_SCHEDULES = ("linear", "log")
SPARSITY_PENALTIES = ("sampled", "expected")
TEACHERS = ("same_model", "cached")
FINAL_BINARIZATIONS = ("topk", "threshold")


@dataclass
class PruningArguments(TrainingArguments):
    """Arguments of `PruningTrainer`; every field is also a flag of `hf-heuristic-core prune`."""

    recipe: str = field(default="auto", metadata={
        "help": "auto (the paper's recipe when the run is long enough for its schedule, else the short one), paper "
                "or short. It sets sparsity_penalty, reg_learning_rate, warmup_steps (when left at the paper's 200) "
                "and the mask init (init_mean, when left at the paper's 10) unless you set them."})
    target_sparsity: float = field(default=0.5, metadata={
        "help": "Fraction of enabled units (heads + MLP blocks, each counted once) to prune, in [0, 1)."})
    start_sparsity: float = field(default=0.0, metadata={"help": "Target sparsity at step 0 of the schedule."})
    sparsity_warmup_steps: int | None = field(default=None, metadata={
        "help": "Steps over which the target rises from start_sparsity to target_sparsity. Default: the paper's "
                "6500 + 50 * target_percent, capped at 90%% of the run (with a warning) when the run is shorter."})
    sparsity_schedule: str = field(default="linear", metadata={
        "help": "linear, or log: 1 - exp(log(1-s0) + (log(1-sT) - log(1-s0)) * step / warmup)."})
    mask_learning_rate: float = field(default=0.1, metadata={"help": "Learning rate of the mask logits (log_alpha)."})
    reg_learning_rate: float | None = field(default=None, metadata={
        "help": "Learning rate of the Lagrange multipliers (gradient ascent). Default: the recipe's (paper 1.0, "
                "short 0.1)."})
    sparsity_penalty: str | None = field(default=None, metadata={
        "help": "sampled: c = 1 - sum(z)/N from the sampled masks (the paper's code); expected: 1 - E[L0]/N (CoFi). "
                "Default: the recipe's (paper sampled, short expected)."})
    teacher: str = field(default="same_model", metadata={
        "help": "same_model: the wrapped model with masks disabled, run every step (no second copy); cached: "
                "teacher logits computed once before training (the teacher is frozen)."})
    kl_temperature: float = field(default=1.0, metadata={"help": "Softmax temperature of the KL (the paper uses 1)."})
    keep_dropout: bool = field(default=False, metadata={
        "help": "Run the student with dropout. Off by default: a student with dropout cannot reach KL 0 against "
                "a teacher without it."})
    final_binarization: str = field(default="topk", metadata={
        "help": "topk: exactly round(target * N) units pruned; threshold: the relaxation's paper rule (hard concrete: "
                "deterministic-then-threshold; continuous sparsification: s > 0; Gumbel-sigmoid: l > 0). With "
                "sparsity_control=penalty there is no target, so the paper rule is used."})
    final_threshold: float = field(default=0.5, metadata={
        "help": "Threshold of the paper's rule (it used 0.5 at 50%% and 0.35 at 70%%)."})
    warmup_steps: float = field(default=200, metadata={
        "help": "Learning-rate warm-up steps for both parameter groups (the paper: 200), then linear decay."})
    teacher_cache_dtype: str = field(default="auto", metadata={
        "help": "How teacher='cached' keeps per-token logits: auto (bfloat16, else top-k if that is what fits), "
                "float32, bfloat16 or topk (the top teacher_cache_topk logits + the log-normalizer)."})
    teacher_cache_topk: int = field(default=64, metadata={"help": "Logits kept per token by teacher_cache_dtype=topk."})
    teacher_cache_max_gb: float = field(default=2.0, metadata={
        "help": "Largest teacher cache to build; a larger one falls back to teacher=same_model with a warning."})
    convergence_check: bool = field(default=True, metadata={
        "help": "At the end, compare the subnetwork's KL to the full model with random subnetworks of the same "
                "per-layer sizes and check that the mask logits moved; the verdict goes into the artifact."})
    convergence_subnetworks: int = field(default=8, metadata={"help": "Random subnetworks the check compares with."})
    convergence_batches: int = field(default=4, metadata={
        "help": "Evaluation batches of the check (eval_dataset if given, else the training data)."})
    objective: str = field(default="kl", metadata={
        "help": "kl: KL to the full model (The Heuristic Core); task: the task loss on the batch's labels (Lepori, "
                "Csordás: masks for a subtask); task+kl: both. See training.objectives."})
    sparsity_control: str = field(default="lagrangian", metadata={
        "help": "lagrangian: reach target_sparsity with Lagrange multipliers; penalty: the papers' fixed penalty "
                "(penalty_weight times the relaxation's penalty)."})
    penalty_weight: float | None = field(default=None, metadata={
        "help": "Weight of the fixed penalty: lambda (continuous sparsification, default 1e-8) or alpha "
                "(Gumbel-sigmoid, on the logits' sum / batch size, default 1e-4)."})
    remove_unused_columns: bool = field(default=True, metadata={
        "help": "Drop dataset columns the wrapped model's forward does not take."})

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
            ("objective", self.objective in ("kl", "task", "task+kl"), "must be one of ('kl', 'task', 'task+kl')"),
            ("sparsity_control", self.sparsity_control in ("lagrangian", "penalty"),
             "must be one of ('lagrangian', 'penalty')"),
            ("penalty_weight", self.penalty_weight is None or self.penalty_weight >= 0, "must be >= 0"),
            ("final_binarization", self.final_binarization in FINAL_BINARIZATIONS,
             f"must be one of {FINAL_BINARIZATIONS}"),
            ("mask_learning_rate", self.mask_learning_rate > 0, "must be > 0"),
            ("reg_learning_rate", self.reg_learning_rate is None or self.reg_learning_rate > 0, "must be > 0"),
            ("teacher_cache_dtype", self.teacher_cache_dtype in CACHE_DTYPES, f"must be one of {CACHE_DTYPES}"),
            ("teacher_cache_topk", self.teacher_cache_topk >= 1, "must be >= 1"),
            ("teacher_cache_max_gb", self.teacher_cache_max_gb >= 0, "must be >= 0"),
            ("convergence_subnetworks", self.convergence_subnetworks >= 1, "must be >= 1"),
            ("convergence_batches", self.convergence_batches >= 1, "must be >= 1"),
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
