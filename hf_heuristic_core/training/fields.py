"""The mask-learning fields of `PruningArguments`, in a module that imports neither torch nor transformers.

`PruningArguments` inherits them (ahead of `TrainingArguments`, so `warmup_steps` and `remove_unused_columns` keep
this module's defaults); the CLI builds `prune --help` from them without paying for torch, so help stays fast.
"""

from __future__ import annotations

from dataclasses import dataclass, field

RECIPE_NAMES = ("auto", "paper", "short")
SPARSITY_SCHEDULES = ("linear", "log")
SPARSITY_PENALTIES = ("sampled", "expected")
TEACHERS = ("same_model", "cached")
FINAL_BINARIZATIONS = ("topk", "threshold")
CACHE_DTYPES = ("auto", "float32", "bfloat16", "topk")
TEACHER_LOGITS_DTYPES = ("float32", "bfloat16")


@dataclass
class PruningFields:
    """The knobs of mask learning (validated in `PruningArguments.__post_init__`)."""

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
    teacher_logits_dtype: str = field(default="float32", metadata={
        "help": "float32, or bfloat16: the same-model teacher's logits are kept in bf16 from its forward pass to the "
                "KL (half their memory; the KL then differs by bf16 rounding, see BENCHMARKS.md)."})
    kl_chunk_size: int | None = field(default=None, metadata={
        "help": "Compute the KL this many rows (examples, or tokens for per-token logits) at a time, with a backward "
                "of its own: the same value with far less memory for per-token logits (e.g. 1024). Default: at once."})
    keep_dropout: bool = field(default=False, metadata={
        "help": "Run the student with dropout. Off by default: a student with dropout cannot reach KL 0 against "
                "a teacher without it."})
    final_binarization: str = field(default="topk", metadata={
        "help": "topk: exactly round(target * N) units pruned; threshold: the relaxation's paper rule (hard concrete: "
                "deterministic-then-threshold; continuous sparsification: s > 0; Gumbel-sigmoid: l > 0). With "
                "sparsity_control=penalty there is no target, so the paper rule is used."})
    objective: str = field(default="kl", metadata={
        "help": "kl: KL to the full model (The Heuristic Core); task: the task loss on the batch's labels (Lepori, "
                "Csordás: masks for a subtask); task+kl: both. See training.objectives."})
    sparsity_control: str = field(default="lagrangian", metadata={
        "help": "lagrangian: reach target_sparsity with Lagrange multipliers; penalty: the papers' fixed penalty "
                "(penalty_weight times the relaxation's penalty)."})
    penalty_weight: float | None = field(default=None, metadata={
        "help": "Weight of the fixed penalty: lambda (continuous sparsification, default 1e-8) or alpha "
                "(Gumbel-sigmoid, on the logits' sum / batch size, default 1e-4)."})
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
    remove_unused_columns: bool = field(default=True, metadata={
        "help": "Drop dataset columns the wrapped model's forward does not take."})
    warm_start_scores: str | None = field(default=None, metadata={
        "help": "Start the mask logits from a ranking: a MIB importance file or a mask artifact folder."})
    warm_start_spread: float = field(default=3.0, metadata={
        "help": "Warm start: logits from init_mean - spread (worst) to + spread (best)."})
