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
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from .arguments import ARM_CHOICES, CARRY_CHOICES, LEGACY_SETTINGS, MASK_FIELDS, SOURCE_FIELDS, InductionArguments
from ..errors import UsageError
from ..io_utils import atomic_write_text
from ..artifacts import read_artifact
from ..plotting.induction import plot_induction_curves
from .arithmetic import arithmetic_dataset, arithmetic_model, induction_splits, source_splits
from .controls import build_arm
from .discovery import DiscoverySettings, describe_masks, discover_subnetwork, subnetwork_accuracy
from .freezing import frozen_gates
from .report import compare_arms, induction_markdown, summarize, warnings_for

__all__ = ["ARM_CHOICES", "InductionArguments", "load_masks", "run_induction"]

logger = logging.getLogger(__name__)

def load_masks(path: str) -> dict[str, Any]:
    """A `.safetensors` file of masks, or a mask artifact (folder or Hub id) read with `read_artifact`."""
    if str(path).endswith(".safetensors"):
        if not Path(path).is_file():
            raise UsageError(f"--masks {path}: no such file; pass a masks .safetensors file or a mask artifact folder.")
        from safetensors.torch import load_file
        return load_file(path)
    return dict(read_artifact(path).masks)


def _record_path(out: Path, arm: str, k: int, seed: int) -> Path:
    return out / "runs" / f"{arm}-k{k}-seed{seed}.json"


def _same_settings(path: Path, saved: Mapping[str, Any] | None, wanted: Mapping[str, Any]) -> None:
    """Reusing a result made under other settings would report it under the new ones: refuse. A field the saved
    record lacks was added later; the record was made with its old value (`LEGACY_SETTINGS`)."""
    if saved is not None:
        saved = {**{k: v for k, v in LEGACY_SETTINGS.items() if k in wanted}, **saved}
    if saved != dict(wanted):
        changed = {k: (None if saved is None else saved.get(k), v) for k, v in wanted.items()
                   if saved is None or saved.get(k) != v}
        raise UsageError(f"{path} was made with other settings (saved vs now: {changed}); use a new --output_dir, "
                         "or the settings it was made with.")


def _read_record(path: Path, settings: Mapping[str, Any]) -> dict[str, Any] | None:
    if not path.exists():
        return None
    record = json.loads(path.read_text())
    _same_settings(path, record.get("settings"), settings)
    return record


def _prepare_source(args: InductionArguments, out: Path, source: Any, masks: Any, arithmetic_checks: bool = True
                    ) -> tuple[Any, Any, dict]:
    """The source model and masks (trained / discovered when --arithmetic and absent) and their checks (on T1 and
    S1 only when the target data is the arithmetic one: another task's source is not an a + ab model)."""
    import torch
    from transformers import AutoModelForCausalLM

    from .training import labeled_accuracy, train_last_token  # at call time: tests patch this name on its module

    diagnostics: dict[str, Any] = {}
    if source is None:
        source_dir = Path(args.source) if args.source else out / "source"
        if args.arithmetic and not (source_dir / "config.json").exists():
            model = arithmetic_model(args.num_tokens, args.layers, args.hidden, args.heads, args.inner,
                                     seed=args.data_seed, dropout=args.dropout)
            splits = source_splits(args.num_tokens, args.modulus, args.source_train_fraction, seed=args.data_seed)
            started = time.time()
            info = train_last_token(model, splits["train"], epochs=args.source_epochs,
                                    learning_rate=args.source_learning_rate, batch_size=args.source_batch_size,
                                    seed=args.data_seed, weight_decay=0.01)
            info.update(test_accuracy=labeled_accuracy(model, splits["test"]), seconds=time.time() - started,
                        settings=args.run_settings(SOURCE_FIELDS))
            staging = source_dir.with_name(source_dir.name + ".partial")   # a crash never leaves half a model
            shutil.rmtree(staging, ignore_errors=True)
            model.save_pretrained(staging)
            (staging / "training.json").write_text(json.dumps(info, indent=2) + "\n")
            staging.rename(source_dir)
        if not (source_dir / "config.json").exists():
            raise UsageError(f"--source {source_dir}: no saved model there (config.json missing); pass the folder "
                             "save_pretrained wrote, or --arithmetic to train one.")
        source = AutoModelForCausalLM.from_pretrained(source_dir)
        if (source_dir / "training.json").exists():
            trained = json.loads((source_dir / "training.json").read_text())
            if args.arithmetic:
                _same_settings(source_dir, trained.get("settings"), args.run_settings(SOURCE_FIELDS))
            diagnostics["source_test_accuracy"] = trained["test_accuracy"]
    source.eval()
    if not arithmetic_checks:
        masks = load_masks(args.masks) if masks is None and args.masks else masks
        if masks is not None:
            masks = {name: torch.as_tensor(value).float() for name, value in masks.items()}
            diagnostics.update(kept_fraction=describe_masks(masks)["kept_fraction"])
        return source, masks, diagnostics
    vocab = getattr(getattr(source, "config", None), "vocab_size", None)
    if vocab is not None and vocab != args.num_tokens + 1:
        raise UsageError(f"The source model has {vocab} tokens but --num_tokens {args.num_tokens} means "
                         f"{args.num_tokens + 1} (numbers 0..{args.num_tokens - 1} and the separator): its rows would "
                         f"not be the ones the source learned; pass --num_tokens {vocab - 1}.")
    pairs = [(a, b) for a in range(args.num_tokens) for b in range(args.num_tokens)]
    t1, s1 = (arithmetic_dataset(task, pairs, args.num_tokens, args.modulus) for task in ("t1", "s1"))
    diagnostics.update(source_task="T1 = a + ab", source_accuracy=labeled_accuracy(source, t1))
    if masks is None and args.masks:
        masks = load_masks(args.masks)
    if masks is None and args.arithmetic:
        mask_dir = out / "subnetwork"
        if not (mask_dir / "pruning_config.json").exists():
            started = time.time()
            settings = DiscoverySettings(target_modules=args.mask_target_modules.split(","),
                                         epochs=args.mask_epochs, learning_rate=args.mask_learning_rate,
                                         penalty=args.mask_penalty, beta_max=args.mask_beta_max, init=args.mask_init,
                                         batch_size=args.mask_batch_size, seed=args.data_seed)
            discover_subnetwork(source, s1, settings, save_directory=str(mask_dir))
            atomic_write_text(mask_dir / "discovery.json", json.dumps(
                {"seconds": time.time() - started, "settings": args.run_settings(MASK_FIELDS)}, indent=2) + "\n")
        found = json.loads((mask_dir / "discovery.json").read_text()) if (mask_dir / "discovery.json").exists() else {}
        _same_settings(mask_dir, found.get("settings"), args.run_settings(MASK_FIELDS))
        masks = load_masks(str(mask_dir))
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
    from .training import BestValidation, train_last_token  # at call time: tests patch this name on its module

    out = Path(args.output_dir)
    if args.carry not in CARRY_CHOICES:
        raise UsageError(f"--carry {args.carry!r}: choose one of {', '.join(CARRY_CHOICES)} ('subnetwork': only the "
                         "subnetwork from the source; 'source': the authors' transplant, everything the masks do not "
                         "cover from the source).")
    if data is not None and args.arithmetic:
        raise UsageError("--arithmetic trains an a + ab source for the arithmetic target task; with your own data, "
                         "pass the source and masks instead.")
    source, masks, diagnostics = _prepare_source(args, out, source, masks, arithmetic_checks=data is None)
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
                    model = build_arm(source, masks, arm, seed, carry=args.carry)
                    best = BestValidation(splits["validation"], splits["test"])
                    info = train_last_token(model, splits["train"], epochs=args.epochs,
                                            learning_rate=args.learning_rate, batch_size=args.batch_size, seed=seed,
                                            weight_decay=args.weight_decay, callbacks=[best])
                    record = {"arm": arm, "k": k, "seed": seed, "train_rows": len(splits["train"]),
                              **transplant_check(model, source),
                              "test_accuracy": best.test_at_best, "best_validation": best.best_validation,
                              "best_epoch": best.best_epoch, "validation_history": best.history, **info,
                              "seconds": time.time() - started, "settings": settings}
                    path.parent.mkdir(parents=True, exist_ok=True)   # made with the first record, not before
                    atomic_write_text(path, json.dumps(record, indent=2) + "\n")
                    logger.info("induction %s k=%d seed=%d: test %.3f (best validation %.3f at epoch %s)", arm, k,
                                seed, record["test_accuracy"], record["best_validation"], record["best_epoch"])
                records.append(record)
    return write_report(out, records, diagnostics, args)


def transplant_check(model: Any, source: Any) -> dict[str, Any]:
    """How many entries are frozen and whether every one still equals the source after training (a guard: a
    frozen entry that moved would make the arm a different experiment without any error)."""

    frozen, intact = 0, True
    for name, gate in frozen_gates(model).items():
        module_name, _, attribute = name.rpartition(".")
        effective = getattr(model.get_submodule(module_name) if module_name else model, attribute)
        gate = gate.bool().to(effective.device)
        frozen += int(gate.sum())
        intact &= bool(effective.detach()[gate].equal(source.get_parameter(name).detach()[gate].to(effective.device)))
    return {"frozen_entries": frozen, "transplant_intact": intact}


def write_report(out: Path, records: list[dict[str, Any]], diagnostics: Mapping[str, Any],
                 args: InductionArguments) -> dict[str, Any]:

    summary = summarize(records)
    comparisons = compare_arms(summary)
    chance = 1.0 / args.modulus
    warnings = warnings_for(records, diagnostics, min_source_accuracy=args.min_source_accuracy,
                            min_subnetwork_accuracy=args.min_subnetwork_accuracy, chance=chance)
    for warning in warnings:
        logger.warning("induction report: %s", warning)
    report = {"summary": summary, "comparisons": comparisons, "diagnostics": dict(diagnostics),
              "warnings": warnings, "settings": asdict(args), "chance": chance}
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "report.json", json.dumps(report, indent=2) + "\n")
    atomic_write_text(out / "report.md", induction_markdown(summary, comparisons, diagnostics, warnings,
                                                            asdict(args)))
    if args.figure and summary:
        plot_induction_curves(summary, path=out / "induction", chance=chance)
    return report
