"""The Subtask Induction experiment: every (arm, k, seed) trained on the target task, one JSON record each, resumable.

    run_induction(InductionArguments(output_dir="runs/si", arithmetic=True))          # the whole reproduction
    run_induction(InductionArguments(output_dir="runs/si", source="src", masks="masks"))

With `arithmetic=True` the source model is trained on T1 = a + ab and the S1 = ab subnetwork is found with continuous
sparsification first (both saved under `output_dir`, both skipped when already there). Then for each k (number of
disambiguating T2 pairs), arm and seed, `build_arm(source, masks, arm, seed)` is trained on T2 with a `Trainer` and
the test accuracy of its best validation epoch is written to `runs/<arm>-k<k>-seed<seed>.json` (atomically). A
restarted run skips every record already written; a record made with other training settings is refused rather
than mixed in. Finally `report.md`, `report.json` and `induction.png/pdf` (accuracy vs k, seed bands).

Other target tasks: pass `data=lambda k: DatasetDict(train=..., validation=..., test=...)` with causal-LM rows
(`input_ids`, `labels` with -100 where unscored).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..io_utils import atomic_write, atomic_write_text

__all__ = ["ARM_CHOICES", "InductionArguments", "load_masks", "run_induction"]

logger = logging.getLogger(__name__)

ARM_CHOICES = ("subnetwork", "random", "inverse", "full", "scratch")
# Fields that change what a run computes: a record written under other values is not comparable.
RUN_FIELDS = ("num_tokens", "modulus", "eval_size", "data_seed", "epochs", "learning_rate", "batch_size",
              "weight_decay")


@dataclass
class InductionArguments:
    """Subtask Induction on modular arithmetic; defaults: the CPU-scale setup of SECOND_WAVE.md (~10 min, 2 cores)."""

    output_dir: str = field(default="runs/induction", metadata={"help": "Where records and the report go (resumable)."})
    source: str | None = field(default=None, metadata={
        "help": "Folder of the trained source causal LM (save_pretrained). With --arithmetic: trained if absent."})
    masks: str | None = field(default=None, metadata={
        "help": "The subnetwork: a mask artifact folder / Hub id, or a masks .safetensors file (1 = keep)."})
    arithmetic: bool = field(default=False, metadata={
        "help": "Run the whole reproduction: train the source on T1 = a+ab, find the S1 = ab subnetwork, then the arms."})
    arms: str = field(default="subnetwork,random,scratch", metadata={
        "help": f"Comma-separated arms among {', '.join(ARM_CHOICES)}."})
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
        "help": "T2 weight decay (the transplanted entries are frozen by a parametrization, so decay cannot move them)."})
    source_epochs: float = field(default=150, metadata={"help": "--arithmetic: source T1 epochs."})
    source_learning_rate: float = field(default=1e-3, metadata={"help": "--arithmetic: source learning rate."})
    source_batch_size: int = field(default=64, metadata={"help": "--arithmetic: source batch size."})
    source_train_fraction: float = field(default=0.5, metadata={"help": "--arithmetic: share of pairs T1 trains on."})
    layers: int = field(default=2, metadata={"help": "--arithmetic: GPT-2 layers."})
    hidden: int = field(default=64, metadata={"help": "--arithmetic: GPT-2 width."})
    heads: int = field(default=4, metadata={"help": "--arithmetic: attention heads."})
    inner: int = field(default=256, metadata={"help": "--arithmetic: MLP width."})
    mask_target_modules: str = field(default="wte,c_attn,c_proj,c_fc", metadata={
        "help": "--arithmetic: masked modules (wte = token embedding; without it the pilot saw no effect)."})
    mask_epochs: int = field(default=30, metadata={"help": "--arithmetic: continuous-sparsification epochs."})
    mask_learning_rate: float = field(default=1e-2, metadata={"help": "--arithmetic: mask logits' Adam lr."})
    mask_penalty: float = field(default=1e-6, metadata={"help": "--arithmetic: lambda of the L0 (soft-mask sum)."})
    mask_beta_max: float = field(default=100.0, metadata={"help": "--arithmetic: final beta (Zhang: 100)."})
    min_source_accuracy: float = field(default=0.9, metadata={
        "help": "Warn when the source scores below this on T1 (all pairs)."})
    min_subnetwork_accuracy: float = field(default=0.9, metadata={
        "help": "Warn when the subnetwork scores below this on S1 (all pairs)."})
    figure: bool = field(default=True, metadata={"help": "Write the accuracy-vs-k figure (needs matplotlib)."})

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
        try:
            return [int(v) for v in getattr(self, flag).split(",") if v.strip()]
        except ValueError:
            raise UsageError(f"--{flag} {getattr(self, flag)!r} must list integers, e.g. 0,1,2.") from None

    def seed_list(self) -> list[int]:
        return self._ints("seeds")

    def k_list(self) -> list[int]:
        return self._ints("ks")

    def run_settings(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in RUN_FIELDS}


def load_masks(path: str) -> dict[str, Any]:
    """A `.safetensors` file of masks, or a mask artifact (folder or Hub id) read with `read_artifact`."""
    if str(path).endswith(".safetensors"):
        if not Path(path).is_file():
            raise UsageError(f"--masks {path}: no such file; pass a masks .safetensors file or a mask artifact folder.")
        from safetensors.torch import load_file
        return load_file(path)
    from ..artifacts import read_artifact
    return dict(read_artifact(path).masks)


def _record_path(out: Path, arm: str, k: int, seed: int) -> Path:
    return out / "runs" / f"{arm}-k{k}-seed{seed}.json"


def _read_record(path: Path, settings: Mapping[str, Any]) -> dict[str, Any] | None:
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    if record.get("settings") != dict(settings):
        raise UsageError(f"{path} was trained with other settings ({record.get('settings')} vs {dict(settings)}); "
                         "use a new --output_dir, or the settings it was made with.")
    return record


def _prepare_source(args: InductionArguments, out: Path, source: Any, masks: Any) -> tuple[Any, Any, dict]:
    """The source model and masks (trained / discovered when --arithmetic and absent) and their checks."""
    import torch
    from transformers import AutoModelForCausalLM

    from .arithmetic import arithmetic_dataset, arithmetic_model, source_splits
    from .discovery import describe_masks, discover_subnetwork, subnetwork_accuracy
    from .training import labeled_accuracy, train_last_token

    diagnostics: dict[str, Any] = {}
    if source is None:
        source_dir = Path(args.source) if args.source else out / "source"
        if args.arithmetic and not (source_dir / "config.json").exists():
            model = arithmetic_model(args.num_tokens, args.layers, args.hidden, args.heads, args.inner,
                                     seed=args.data_seed)
            splits = source_splits(args.num_tokens, args.modulus, args.source_train_fraction, seed=args.data_seed)
            started = time.time()
            info = train_last_token(model, splits["train"], epochs=args.source_epochs,
                                    learning_rate=args.source_learning_rate, batch_size=args.source_batch_size,
                                    seed=args.data_seed, weight_decay=0.01)
            info.update(test_accuracy=labeled_accuracy(model, splits["test"]), seconds=time.time() - started)
            source_dir.mkdir(parents=True, exist_ok=True)
            model.save_pretrained(source_dir)
            atomic_write_text(source_dir / "training.json", json.dumps(info, indent=2) + "\n")
        if not (source_dir / "config.json").exists():
            raise UsageError(f"--source {source_dir}: no saved model there (config.json missing); pass the folder "
                             "save_pretrained wrote, or --arithmetic to train one.")
        source = AutoModelForCausalLM.from_pretrained(source_dir)
        if (source_dir / "training.json").exists():
            diagnostics["source_test_accuracy"] = json.loads((source_dir / "training.json").read_text())["test_accuracy"]
    source.eval()
    pairs = [(a, b) for a in range(args.num_tokens) for b in range(args.num_tokens)]
    t1, s1 = (arithmetic_dataset(task, pairs, args.num_tokens, args.modulus) for task in ("t1", "s1"))
    diagnostics.update(source_task="T1 = a + ab", source_accuracy=labeled_accuracy(source, t1))
    if masks is None and args.masks:
        masks = load_masks(args.masks)
    if masks is None and args.arithmetic:
        mask_file = out / "subnetwork" / "masks.safetensors"
        if not mask_file.exists():
            from safetensors.torch import save_file
            started = time.time()
            found = discover_subnetwork(source, s1, target_modules=args.mask_target_modules.split(","),
                                        epochs=args.mask_epochs, learning_rate=args.mask_learning_rate,
                                        penalty=args.mask_penalty, beta_max=args.mask_beta_max, seed=args.data_seed)
            mask_file.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(mask_file, lambda tmp: save_file({k: v.contiguous() for k, v in found.items()}, tmp))
            atomic_write_text(mask_file.parent / "discovery.json",
                              json.dumps({"seconds": time.time() - started}, indent=2) + "\n")
        masks = load_masks(str(mask_file))
    if masks is not None:
        masks = {name: torch.as_tensor(value).float() for name, value in masks.items()}
        described = describe_masks(masks)
        diagnostics.update(subtask="S1 = ab", subnetwork_accuracy=subnetwork_accuracy(source, masks, s1),
                           subnetwork_source_task_accuracy=subnetwork_accuracy(source, masks, t1),
                           kept_fraction=described["kept_fraction"], masked_entries=described["masked_entries"],
                           kept_per_tensor=described["per_tensor"])
    return source, masks, diagnostics


def run_induction(args: InductionArguments, *, source: Any = None, masks: Mapping[str, Any] | None = None,
                  data: Callable[[int], Any] | None = None) -> dict[str, Any]:
    """Train every missing (arm, k, seed), then write the report; returns the report's content."""
    from . import build_arm
    from .arithmetic import induction_splits
    from .training import BestValidation, train_last_token

    out = Path(args.output_dir)
    (out / "runs").mkdir(parents=True, exist_ok=True)
    source, masks, diagnostics = _prepare_source(args, out, source, masks)
    settings = args.run_settings()
    if data is None:
        data = lambda k: induction_splits(k, args.num_tokens, args.modulus, args.eval_size, seed=args.data_seed)  # noqa: E731
    records = []
    for k in args.k_list():
        splits = data(k)
        for arm in args.arm_list():
            for seed in args.seed_list():
                path = _record_path(out, arm, k, seed)
                record = _read_record(path, settings)
                if record is None:
                    started = time.time()
                    model = build_arm(source, masks, arm, seed)
                    best = BestValidation(splits["validation"], splits["test"])
                    info = train_last_token(model, splits["train"], epochs=args.epochs,
                                            learning_rate=args.learning_rate, batch_size=args.batch_size, seed=seed,
                                            weight_decay=args.weight_decay, callbacks=[best])
                    record = {"arm": arm, "k": k, "seed": seed, "train_rows": len(splits["train"]),
                              "test_accuracy": best.test_at_best, "best_validation": best.best_validation,
                              "best_epoch": best.best_epoch, "validation_history": best.history, **info,
                              "seconds": time.time() - started, "settings": settings}
                    atomic_write_text(path, json.dumps(record, indent=2) + "\n")
                    logger.info("induction %s k=%d seed=%d: test %.3f (best validation %.3f at epoch %s)", arm, k,
                                seed, record["test_accuracy"], record["best_validation"], record["best_epoch"])
                records.append(record)
    return write_report(out, records, diagnostics, args)


def write_report(out: Path, records: list[dict[str, Any]], diagnostics: Mapping[str, Any],
                 args: InductionArguments) -> dict[str, Any]:
    from .report import compare_arms, induction_markdown, summarize, warnings_for

    summary = summarize(records)
    comparisons = compare_arms(summary)
    chance = 1.0 / args.modulus
    warnings = warnings_for(records, diagnostics, min_source_accuracy=args.min_source_accuracy,
                            min_subnetwork_accuracy=args.min_subnetwork_accuracy, chance=chance)
    for warning in warnings:
        logger.warning("induction report: %s", warning)
    report = {"summary": summary, "comparisons": comparisons, "diagnostics": dict(diagnostics),
              "warnings": warnings, "settings": asdict(args), "chance": chance}
    atomic_write_text(out / "report.json", json.dumps(report, indent=2) + "\n")
    atomic_write_text(out / "report.md", induction_markdown(summary, comparisons, diagnostics, warnings,
                                                            asdict(args)))
    if args.figure and summary:
        from ..plotting.induction import plot_induction_curves
        plot_induction_curves(summary, path=out / "induction", chance=chance)
    return report
