"""The settings of a Subtask Induction experiment (`run_induction`, `hf-heuristic-core induce`).

Torch-free on purpose: `induce --help` reads these flags without importing torch, and the library owns them, so the
runner never imports the command line (the CLI imports the library, never the reverse).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import UsageError

__all__ = ["ARM_CHOICES", "CARRY_CHOICES", "LEGACY_SETTINGS", "MASK_FIELDS", "RUN_FIELDS", "SOURCE_FIELDS",
           "InductionArguments"]

ARM_CHOICES = ("subnetwork", "random", "inverse", "full", "scratch")
CARRY_CHOICES = ("subnetwork", "source")   # = transfer.CARRY_CHOICES (kept here torch-free for --help)
# Fields that change what a run computes: a record written under other values is not comparable.
RUN_FIELDS = ("num_tokens", "modulus", "eval_size", "data_seed", "epochs", "learning_rate", "batch_size",
              "weight_decay", "carry")
# --arithmetic: what the saved source and subnetwork were made with (reused only under the same values).
SOURCE_FIELDS = ("num_tokens", "modulus", "data_seed", "source_epochs", "source_learning_rate", "source_batch_size",
                 "source_train_fraction", "layers", "hidden", "heads", "inner", "dropout")
MASK_FIELDS = ("data_seed", "mask_target_modules", "mask_epochs", "mask_learning_rate", "mask_penalty",
               "mask_beta_max", "mask_init", "mask_batch_size")
# The value each later-added field had before it existed: a record saved without the field was made with it.
LEGACY_SETTINGS = {"carry": "subnetwork", "dropout": 0.0, "mask_init": 0.0, "mask_batch_size": 64}


@dataclass
class InductionArguments:
    """Subtask Induction on modular arithmetic; defaults: the CPU-scale setup of SECOND_WAVE.md (~13 min on 2 busy
    cores)."""

    output_dir: str = field(default="runs/induction", metadata={"help": "Where records and the report go (resumable)."})
    source: str | None = field(default=None, metadata={
        "help": "Folder of the trained source causal LM (save_pretrained). With --arithmetic: trained if absent."})
    masks: str | None = field(default=None, metadata={
        "help": "The subnetwork: a mask artifact folder / Hub id, or a masks .safetensors file (1 = keep)."})
    arithmetic: bool = field(default=False, metadata={
        "help": "Run the whole reproduction: train the source on T1 = a+ab, find the S1 = ab subnetwork, then the "
                "arms."})
    arms: str = field(default="subnetwork,random,scratch", metadata={
        "help": f"Comma-separated arms among {', '.join(ARM_CHOICES)}."})
    carry: str = field(default="subnetwork", metadata={
        "help": f"Transplant variant, one of {', '.join(CARRY_CHOICES)}: 'subnetwork' = only the subnetwork comes from "
                "the source, everything else fresh; 'source' = the authors' (Zhang et al.'s code): every tensor the "
                "masks do not cover (embeddings, LayerNorms, biases, head) is the source's, trainable, and only the "
                "masked tensors' other entries are fresh. Applies to every masked arm (random included)."})
    seeds: str = field(default="0,1,2", metadata={"help": "Comma-separated seeds (fresh init and data order)."})
    ks: str = field(default="20,100", metadata={"help": "Comma-separated numbers of disambiguating T2 pairs."})
    num_tokens: int = field(default=40, metadata={"help": "Number tokens N (operands 0..N-1)."})
    modulus: int = field(default=7, metadata={"help": "Results are taken mod p."})
    eval_size: int = field(default=400, metadata={"help": "Held-out T2 pairs in validation and in test, each."})
    data_seed: int = field(default=0, metadata={"help": "Seed of the data splits (the same for every arm and seed)."})
    epochs: float = field(default=150, metadata={"help": "T2 training epochs."})
    learning_rate: float = field(default=3e-3, metadata={"help": "T2 learning rate (AdamW)."})
    batch_size: int = field(default=32, metadata={"help": "T2 batch size."})
    weight_decay: float = field(default=0.01, metadata={
        "help": "T2 weight decay (the transplanted entries are frozen by a parametrization, so decay cannot move "
                "them)."})
    source_epochs: float = field(default=150, metadata={"help": "--arithmetic: source T1 epochs."})
    source_learning_rate: float = field(default=1e-3, metadata={"help": "--arithmetic: source learning rate."})
    source_batch_size: int = field(default=64, metadata={"help": "--arithmetic: source batch size."})
    source_train_fraction: float = field(default=0.5, metadata={"help": "--arithmetic: share of pairs T1 trains on."})
    layers: int = field(default=2, metadata={"help": "--arithmetic: GPT-2 layers."})
    hidden: int = field(default=64, metadata={"help": "--arithmetic: GPT-2 width."})
    heads: int = field(default=4, metadata={"help": "--arithmetic: attention heads."})
    inner: int = field(default=256, metadata={"help": "--arithmetic: MLP width."})
    dropout: float = field(default=0.0, metadata={
        "help": "--arithmetic: the source's GPT-2 dropout (residual, embedding, attention); every arm inherits the "
                "source's config, so it trains with the same (Zhang et al.: 0.1)."})
    mask_target_modules: str = field(default="wte,c_attn,c_proj,c_fc", metadata={
        "help": "--arithmetic: masked modules (wte = token embedding; without it the pilot saw no effect)."})
    mask_epochs: int = field(default=30, metadata={"help": "--arithmetic: continuous-sparsification epochs."})
    mask_learning_rate: float = field(default=1e-2, metadata={"help": "--arithmetic: mask logits' Adam lr."})
    mask_penalty: float = field(default=1e-6, metadata={"help": "--arithmetic: lambda of the L0 (soft-mask sum)."})
    mask_beta_max: float = field(default=100.0, metadata={"help": "--arithmetic: final beta (Zhang: 100)."})
    mask_init: float = field(default=0.0, metadata={"help": "--arithmetic: initial mask logit s (Zhang: -0.1)."})
    mask_batch_size: int = field(default=64, metadata={"help": "--arithmetic: discovery batch size (Zhang: 500)."})
    min_source_accuracy: float = field(default=0.9, metadata={
        "help": "Warn when the source scores below this on T1 (all pairs)."})
    min_subnetwork_accuracy: float = field(default=0.9, metadata={
        "help": "Warn when the subnetwork scores below this on S1 (all pairs)."})
    figure: bool = field(default=True, metadata={"help": "Write the accuracy-vs-k figure (needs matplotlib)."})
    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "Write into an --output_dir that holds another experiment's files (nothing is deleted); the same "
                "experiment resumes without it, and more arms, seeds and ks may be added."})
    allow_unfinished: bool = field(default=False, metadata={
        "help": "Transplant --masks that are not a finished run's (a mid-run checkpoint-N); refused without it."})

    def __post_init__(self) -> None:
        arms = self.arm_list()
        unknown = [a for a in arms if a not in ARM_CHOICES]
        if unknown or not arms:
            raise UsageError(f"--arms {self.arms!r}: unknown arm(s) {unknown}; choose among {', '.join(ARM_CHOICES)}.")
        for flag in ("seeds", "ks"):
            values = self._ints(flag)
            if not values or min(values) < 0 or len(set(values)) != len(values):
                raise UsageError(f"--{flag} {getattr(self, flag)!r} must list distinct integers >= 0, e.g. 0,1,2.")
        if self.epochs <= 0 or self.learning_rate <= 0 or self.batch_size < 1:
            raise UsageError(f"--epochs, --learning_rate and --batch_size must be > 0, got {self.epochs}, "
                             f"{self.learning_rate}, {self.batch_size}.")
        if not self.arithmetic and (self.source is None or self.masks is None):
            needs_masks = any(a in ("subnetwork", "random", "inverse") for a in arms)
            if self.source is None or (needs_masks and self.masks is None):
                raise UsageError("Give --source (a saved model folder) and --masks (a mask artifact), or --arithmetic "
                                 "to train the source and find its subnetwork first.")

    def arm_list(self) -> list[str]:
        return [a.strip() for a in self.arms.split(",") if a.strip()]

    def _ints(self, flag: str) -> list[int]:
        return _int_list(getattr(self, flag), flag)

    def seed_list(self) -> list[int]:
        return _int_list(self.seeds, "seeds")

    def k_list(self) -> list[int]:
        return _int_list(self.ks, "ks")

    def run_settings(self, names: Sequence[str] = RUN_FIELDS) -> dict[str, Any]:
        return {name: getattr(self, name) for name in names}


def _int_list(text: str, flag: str) -> list[int]:
    try:
        return [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"--{flag} {text!r} must list integers, e.g. 0,1,2.") from None
