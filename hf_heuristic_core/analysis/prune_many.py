"""Multi-seed subnetwork analysis on a model: `prune_many` and ablation tables.

`prune_many` prunes one model at several sparsities x seeds (the paper's 12-seed tables), evaluates every
subnetwork and three control subnetworks per sparsity on every evaluation set, and leaves a *runs folder* that
`hf_heuristic_core.report.analyze` turns into tables and figures without the model:

    runs_dir/
      manifest.json            model, pruning settings, data spec (so analyze can reload model and data)
      full_model.json          full-model accuracy per evaluation set
      sp50-seed0/              one mask artifact (kilobytes) + result.json per run
      controls/sp50-inverse/   result.json of each control subnetwork (its masks inside)
      results.json, results.csv, summary.csv

`ablation_table` ablates units of the *full* model one at a time and jointly (the paper's Table 3), next to the
average over non-core heads. Units are `(layer, head)` for heads and `("mlp", layer)` for MLP blocks; labels read
"L4.H0" and "L3.MLP".
"""

from __future__ import annotations

import csv
import io
import json
import logging
import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import torch

from ..config import PruningConfig
from ..data.spec import datasets_from_spec
from ..data.tokenize import tokenize_pairs
from ..evaluation.subnetwork import evaluate_subnetwork
from ..io_utils import atomic_write_text
from .mask_stats import inverse, random_from_complement, random_like
from ..model import PrunableModel

logger = logging.getLogger(__name__)

__all__ = [
    "AblationRow", "AblationTable", "CONTROL_KINDS", "PruneManyResult", "ablation_masks", "ablation_table",
    "collect_results", "datasets_from_spec", "group_label", "parse_unit", "prune_many", "read_json", "run_name",
    "sparsity_tag", "summarize", "tokenize_pairs", "unit_label", "units_from_masks", "write_json",
]

MANIFEST_NAME = "manifest.json"
RESULT_NAME = "result.json"
RESULTS_NAME = "results.json"
FULL_MODEL_NAME = "full_model.json"
CONTROLS_DIR = "controls"
MASKS_FILE = "masks.safetensors"
CONFIG_FILE = "pruning_config.json"
CONTROL_KINDS = ("random_like", "random_from_complement", "inverse")
RUN_DIR_PATTERN = re.compile(r"^sp(?P<sp>\d+(?:\.\d+)?)-seed(?P<seed>-?\d+)$")
RESERVED_OVERRIDES = ("output_dir", "target_sparsity", "seed")

Unit = tuple  # (layer, head) or ("mlp", layer)


# --------------------------------------------------------------------------------------------------------------------
# Small helpers: JSON, names, units
# --------------------------------------------------------------------------------------------------------------------


def write_json(path: str | os.PathLike, value: Any) -> None:
    """Atomic JSON write (temp file + rename): a crash never leaves a half-written results file behind."""
    atomic_write_text(Path(path), json.dumps(value, indent=2, default=_json_default) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text())


def _json_default(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.tolist()
    if isinstance(value, (np.integer, np.floating)):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, Path):
        return str(value)
    return str(value)


def sparsity_tag(sparsity: float) -> str:
    """`sp50` for 0.5 (`sp12.5` when the percentage is not whole)."""
    percent = sparsity * 100
    return f"sp{round(percent):02d}" if abs(percent - round(percent)) < 1e-9 else f"sp{percent:g}"


def run_name(sparsity: float, seed: int) -> str:
    """`sp50-seed3`: the folder of the run at sparsity 0.5 with seed 3."""
    return f"{sparsity_tag(sparsity)}-seed{seed}"


def unit_label(unit: Unit) -> str:
    """"L4.H0" for head (4, 0), "L3.MLP" for ("mlp", 3)."""
    unit = parse_unit(unit)
    return f"L{unit[1]}.MLP" if unit[0] == "mlp" else f"L{unit[0]}.H{unit[1]}"


_LABEL = re.compile(r"^\s*L(?P<layer>\d+)\s*[.\s_-]?\s*(?:H(?P<head>\d+)|(?P<mlp>MLP))\s*$", re.IGNORECASE)


def parse_unit(unit: Any) -> Unit:
    """A unit from "L4.H0" / "L4H0" / "L3.MLP", `(4, 0)` or `("mlp", 3)`; always returns the tuple form."""
    if isinstance(unit, str):
        match = _LABEL.match(unit)
        if match is None:
            raise ValueError(f"Cannot read unit {unit!r}: write heads as 'L4.H0' and MLP blocks as 'L3.MLP'.")
        layer = int(match["layer"])
        return ("mlp", layer) if match["mlp"] else (layer, int(match["head"]))
    if isinstance(unit, (tuple, list)) and len(unit) == 2:
        if isinstance(unit[0], str) and unit[0].lower() == "mlp":
            return ("mlp", int(unit[1]))
        if not isinstance(unit[0], str):
            return (int(unit[0]), int(unit[1]))
    raise ValueError(f"Cannot read unit {unit!r}: pass (layer, head), ('mlp', layer) or a label like 'L4.H0'.")


def group_label(units: Sequence[Unit], max_named: int = 4) -> str:
    """"L2.H5 + L3.H7 + L4.H0"; larger groups are summarized so the label stays readable in a figure."""
    labels = [unit_label(u) for u in units]
    if len(labels) <= max_named:
        return " + ".join(labels)
    return f"{len(labels)} units jointly ({' + '.join(labels[:2])} + ...)"


def units_from_masks(heads: Any = None, mlps: Any = None) -> list[Unit]:
    """The kept units (value 1) of a head mask `[L, H]` and an MLP mask `[L]`, heads first."""
    units: list[Unit] = []
    if heads is not None:
        units += [(int(l), int(h)) for l, h in torch.as_tensor(heads).nonzero().tolist()]
    if mlps is not None:
        units += [("mlp", int(l[0])) for l in torch.as_tensor(mlps).reshape(-1, 1).nonzero().tolist()]
    return units


def ablation_masks(units: Iterable[Any], num_layers: int, num_heads: int) -> dict[str, torch.Tensor]:
    """All-ones masks with `units` set to 0 (ablated)."""
    heads, mlps = torch.ones(num_layers, num_heads), torch.ones(num_layers)
    for unit in units:
        unit = parse_unit(unit)
        if unit[0] == "mlp":
            if not 0 <= unit[1] < num_layers:
                raise ValueError(f"{unit_label(unit)} is out of range: the model has {num_layers} layers.")
            mlps[unit[1]] = 0
        else:
            if not (0 <= unit[0] < num_layers and 0 <= unit[1] < num_heads):
                raise ValueError(f"{unit_label(unit)} is out of range: the model has {num_layers} layers x "
                                 f"{num_heads} heads.")
            heads[unit] = 0
    return {"heads": heads, "mlps": mlps}


# --------------------------------------------------------------------------------------------------------------------
# Results table and summary
# --------------------------------------------------------------------------------------------------------------------


def _row_from_result(result: Mapping[str, Any], eval_names: Sequence[str]) -> dict[str, Any]:
    """A flat table row: run info, then accuracy per set, then agreement and KL per set."""
    row: dict[str, Any] = {k: result.get(k) for k in ("run", "sparsity", "seed", "control", "source_seed",
                                                       "realized_sparsity", "units_kept", "units_total")
                           if k in result}
    evaluation = result.get("eval", {})
    for name in eval_names:
        row[name] = evaluation.get(name, {}).get("accuracy")
    for name in eval_names:
        row[f"agreement/{name}"] = evaluation.get(name, {}).get("agreement")
        row[f"kl/{name}"] = evaluation.get(name, {}).get("kl")
    return row


def summarize(rows: Sequence[Mapping[str, Any]], full_accuracy: Mapping[str, float],
              eval_names: Sequence[str]) -> list[dict[str, Any]]:
    """Per sparsity and evaluation set: min, max, mean and std of subnetwork accuracy over seeds, next to the full
    model. std is the population std (ddof=0, numpy's default), so one run gives 0 rather than NaN."""
    summary = []
    for sparsity in sorted({r["sparsity"] for r in rows}):
        group = [r for r in rows if r["sparsity"] == sparsity]
        for name in eval_names:
            values = np.array([r[name] for r in group if r.get(name) is not None], dtype=float)
            if values.size == 0:
                continue
            summary.append({"sparsity": sparsity, "eval_set": name, "full_model": full_accuracy.get(name),
                            "min": float(values.min()), "max": float(values.max()),
                            "mean": float(values.mean()), "std": float(values.std()), "num_runs": int(values.size)})
    return summary


def _csv_text(rows: Sequence[Mapping[str, Any]]) -> str:
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in columns})
    return buffer.getvalue()


@dataclass
class PruneManyResult:
    """What `prune_many` returns (and writes to `runs_dir/results.json`)."""

    runs_dir: Path
    eval_sets: list[str]
    full_model: dict[str, float]
    results: list[dict[str, Any]]
    summary: list[dict[str, Any]]
    controls: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"eval_sets": self.eval_sets, "full_model": self.full_model, "results": self.results,
                "summary": self.summary, "controls": self.controls}


def collect_results(runs_dir: str | os.PathLike) -> PruneManyResult:
    """Rebuild the results table from the per-run `result.json` files (e.g. after an interrupted `prune_many`)."""
    runs_dir = Path(runs_dir)
    full = read_json(runs_dir / FULL_MODEL_NAME) if (runs_dir / FULL_MODEL_NAME).is_file() else {}
    manifest = read_json(runs_dir / MANIFEST_NAME) if (runs_dir / MANIFEST_NAME).is_file() else {}
    results = [read_json(p) for p in sorted(runs_dir.glob(f"sp*-seed*/{RESULT_NAME}"))]
    controls = [read_json(p) for p in sorted((runs_dir / CONTROLS_DIR).glob(f"*/{RESULT_NAME}"))]
    names = list(manifest.get("eval_sets") or full.get("accuracy") or
                 (results[0]["eval"] if results else {}))
    rows = sorted((_row_from_result(r, names) for r in results), key=lambda r: (r["sparsity"], r["seed"]))
    control_rows = sorted((_row_from_result(r, names) for r in controls),
                          key=lambda r: (r["sparsity"], CONTROL_KINDS.index(r["control"])
                                         if r.get("control") in CONTROL_KINDS else 99))
    accuracy = dict(full.get("accuracy", {}))
    return PruneManyResult(runs_dir, names, accuracy, rows, summarize(rows, accuracy, names), control_rows)


# --------------------------------------------------------------------------------------------------------------------
# prune_many
# --------------------------------------------------------------------------------------------------------------------


def _is_finished(run_dir: Path) -> bool:
    return (run_dir / RESULT_NAME).is_file() and _has_artifact(run_dir)


def _has_artifact(run_dir: Path) -> bool:
    return (run_dir / MASKS_FILE).is_file() and (run_dir / CONFIG_FILE).is_file()


def _control_masks(model: PrunableModel, masks: Mapping[str, torch.Tensor],
                   generator: torch.Generator) -> dict[str, dict[str, torch.Tensor]]:
    """The three control subnetworks of one learned mask; unit kinds that are not pruned stay all-ones."""
    enabled = model.enabled_kinds()
    heads, mlps = masks["heads"].long(), masks["mlps"].long()
    ones_h, ones_m = torch.ones_like(heads), torch.ones_like(mlps)
    controls = {
        "random_like": (random_like(heads, generator) if "heads" in enabled else ones_h,
                        random_like(mlps, generator, per_layer=False) if "mlps" in enabled else ones_m),
        "random_from_complement": (random_from_complement(heads, generator=generator) if "heads" in enabled
                                   else ones_h,
                                   random_from_complement(mlps, generator=generator, per_layer=False)
                                   if "mlps" in enabled else ones_m),
        "inverse": (inverse(heads) if "heads" in enabled else ones_h, inverse(mlps) if "mlps" in enabled else ones_m),
    }
    return {kind: {"heads": h.float(), "mlps": m.float()} for kind, (h, m) in controls.items()}


def _load_model(model: str | os.PathLike | PrunableModel, pruning_config: PruningConfig | None,
                model_kwargs: Mapping[str, Any] | None) -> PrunableModel:
    if isinstance(model, PrunableModel):
        if pruning_config is not None:
            logger.warning("prune_many got a loaded PrunableModel; its own pruning config is used and "
                           "pruning_config is ignored.")
        return model
    return PrunableModel.from_pretrained(model, pruning_config or PruningConfig(), **dict(model_kwargs or {}))


def _default_collator(model: PrunableModel, tokenizer: Any) -> Any:
    if tokenizer is not None:
        from transformers import DataCollatorWithPadding
        return DataCollatorWithPadding(tokenizer)
    from ..batching import PadCollator
    return PadCollator(getattr(model.config, "pad_token_id", None) or 0)


def _write_manifest(runs_dir: Path, manifest: dict[str, Any]) -> None:
    """Merge with an existing manifest so that adding seeds or sparsities later keeps the earlier ones listed."""
    path = runs_dir / MANIFEST_NAME
    if path.is_file():
        previous = read_json(path)
        if previous.get("model") not in (None, manifest["model"]):
            logger.warning("%s was written for model %s; now pruning %s.", path, previous.get("model"),
                           manifest["model"])
        for key in ("sparsities", "seeds"):
            manifest[key] = sorted(set(previous.get(key, [])) | set(manifest[key]))
        if manifest.get("data") is None and previous.get("data") is not None:
            manifest["data"] = previous["data"]
    write_json(path, manifest)


def prune_many(model: str | os.PathLike | PrunableModel, train_dataset: Any, eval_sets: Mapping[str, Any],
               runs_dir: str | os.PathLike, sparsities: Sequence[float], seeds: Sequence[int], *,
               pruning_config: PruningConfig | None = None, pruning_overrides: Mapping[str, Any] | None = None,
               data_collator: Any = None, tokenizer: Any = None, means_examples: int | None = 1024,
               eval_batch_size: int = 32, collapse_to_entailment: Any = "auto", entailment_id: int = 0,
               controls: bool = True, control_seed: int = 0, data_spec: Mapping[str, Any] | None = None,
               model_kwargs: Mapping[str, Any] | None = None, show_progress: bool = True) -> PruneManyResult:
    """Prune `model` at every sparsity x seed, evaluate each subnetwork on every set, save masks and results.

    `model`: a path / Hub id (loaded with `pruning_config`) or a loaded `PrunableModel` (its config is used).
    `train_dataset`: tokenized training data (mean activations are computed once on its first `means_examples`
    examples unless the model already has means). `eval_sets`: `{name: tokenized dataset with labels}`.
    `pruning_overrides`: `PruningArguments` kwargs shared by every run (target sparsity, seed and output_dir are
    set per run). `data_spec`: how the data was built (see `datasets_from_spec`), recorded in manifest.json so that
    `analyze` can rebuild the evaluation sets. Finished runs (artifact + result.json) are skipped; a run whose
    artifact exists but whose evaluation did not finish is evaluated from the artifact without re-training.
    `controls`: also evaluate the control subnetworks (random with the same per-layer counts, random from the
    complement, inverse) of the first seed's mask at each sparsity.
    """
    from ..training.arguments import PruningArguments
    from ..training.trainer import PruningTrainer

    overrides = dict(pruning_overrides or {})
    reserved = [k for k in RESERVED_OVERRIDES if k in overrides]
    if reserved:
        raise ValueError(f"pruning_overrides may not set {reserved}: prune_many sets them per run "
                         "(pass sparsities=, seeds= and runs_dir= instead).")
    if not eval_sets:
        raise ValueError("prune_many needs at least one evaluation set, e.g. {'id': tokenized_dataset}.")
    if not sparsities or not seeds:
        raise ValueError("prune_many needs at least one sparsity and one seed.")
    runs_dir = Path(runs_dir)
    runs_dir.mkdir(parents=True, exist_ok=True)
    prunable = _load_model(model, pruning_config, model_kwargs)
    model_path = str(model) if not isinstance(model, PrunableModel) else prunable.pruning_config.base_model_name_or_path
    collator = data_collator or _default_collator(prunable, tokenizer)
    names = list(eval_sets)
    eval_kwargs = dict(batch_size=eval_batch_size, collapse_to_entailment=collapse_to_entailment,
                       entailment_id=entailment_id)
    _write_manifest(runs_dir, {
        "format": "hf_heuristic_core.prune_many", "format_version": 1, "model": model_path,
        "model_class": prunable.pruning_config.base_model_class, "pruning_config": prunable.pruning_config.to_dict(),
        "pruning_overrides": overrides, "sparsities": [float(s) for s in sparsities], "seeds": [int(s) for s in seeds],
        "eval_sets": names, "data": dict(data_spec) if data_spec is not None else None,
        "means_examples": means_examples, "eval_batch_size": eval_batch_size,
        "collapse_to_entailment": collapse_to_entailment, "entailment_id": entailment_id,
        "controls": controls, "control_seed": control_seed,
    })

    cache: dict[str, list[torch.Tensor]] = {}
    full_path = runs_dir / FULL_MODEL_NAME
    if full_path.is_file() and set(read_json(full_path).get("accuracy", {})) >= set(names):
        full = read_json(full_path)
    else:
        with prunable.masks_disabled():
            evaluation = evaluate_subnetwork(prunable, eval_sets, full_model_cache=cache, **eval_kwargs)
        full = {"accuracy": {n: e.get("accuracy") for n, e in evaluation.items()},
                "num_examples": {n: e["num_examples"] for n, e in evaluation.items()}}
        write_json(full_path, full)
    logger.info("Full model accuracy: %s", full["accuracy"])

    plan = [(float(s), int(seed)) for s in sparsities for seed in seeds]
    teacher_cache = None
    for index, (sparsity, seed) in enumerate(plan):
        run_dir = runs_dir / run_name(sparsity, seed)
        if _is_finished(run_dir):
            logger.info("[%d/%d] %s: finished earlier, skipped.", index + 1, len(plan), run_dir.name)
            continue
        started = time.time()
        if _has_artifact(run_dir):
            from ..artifacts import read_artifact
            logger.info("[%d/%d] %s: artifact found, evaluating it.", index + 1, len(plan), run_dir.name)
            artifact = read_artifact(run_dir)
            masks = {"heads": artifact.heads, "mlps": artifact.mlps}
        else:
            if not prunable.has_means and prunable.pruning_config.ablation == "mean":
                data = train_dataset if means_examples is None or not hasattr(train_dataset, "select") \
                    else train_dataset.select(range(min(means_examples, len(train_dataset))))
                prunable.compute_means(data, collate_fn=collator, show_progress=show_progress)
            logger.info("[%d/%d] %s: pruning.", index + 1, len(plan), run_dir.name)
            prunable.reset_masks(seed)
            args = PruningArguments(**{"report_to": "none", "save_strategy": "no", "disable_tqdm": not show_progress,
                                       **overrides, "output_dir": str(run_dir), "target_sparsity": sparsity,
                                       "seed": seed})
            trainer = PruningTrainer(model=prunable, args=args, train_dataset=train_dataset, data_collator=collator,
                                     teacher_cache=teacher_cache)
            trainer.train()
            teacher_cache = trainer.teacher_cache or teacher_cache
            masks = prunable.get_masks(binary=True)
            prunable.eval()
        evaluation = evaluate_subnetwork(prunable, eval_sets, masks=masks, full_model_cache=cache, **eval_kwargs)
        report = prunable.sparsity_report(masks)
        write_json(run_dir / RESULT_NAME, {
            "run": run_dir.name, "sparsity": sparsity, "seed": seed, "realized_sparsity": report["sparsity"],
            "sparsity_params": report["sparsity_params"], "units_kept": report["units_kept"],
            "units_total": report["units_total"], "heads_kept": report.get("heads_kept"),
            "mlps_kept": report.get("mlps_kept"), "eval": evaluation, "seconds": round(time.time() - started, 2)})
        prunable.clear_masks()
        logger.info("%s: sparsity %.3f, accuracy %s", run_dir.name, report["sparsity"],
                    {n: e.get("accuracy") for n, e in evaluation.items()})

    if controls:
        _run_controls(prunable, runs_dir, eval_sets, sparsities, seeds, control_seed, cache, eval_kwargs)
    result = collect_results(runs_dir)
    write_json(runs_dir / RESULTS_NAME, result.to_dict())
    atomic_write_text(runs_dir / "results.csv", _csv_text(result.results + result.controls))
    atomic_write_text(runs_dir / "summary.csv", _csv_text(result.summary))
    return result


def _run_controls(model: PrunableModel, runs_dir: Path, eval_sets: Mapping[str, Any], sparsities: Sequence[float],
                  seeds: Sequence[int], control_seed: int, cache: dict, eval_kwargs: dict) -> None:
    """Evaluate the control subnetworks of the first seed's mask at each sparsity (resumable like the runs)."""
    from ..artifacts import read_artifact
    for sparsity in sparsities:
        source = runs_dir / run_name(float(sparsity), int(seeds[0]))
        artifact = read_artifact(source)
        generator = torch.Generator().manual_seed(int(control_seed))
        masks = _control_masks(model, {"heads": artifact.heads, "mlps": artifact.mlps}, generator)
        for kind, control in masks.items():
            folder = runs_dir / CONTROLS_DIR / f"{sparsity_tag(float(sparsity))}-{kind}"
            if (folder / RESULT_NAME).is_file():
                continue
            folder.mkdir(parents=True, exist_ok=True)
            evaluation = evaluate_subnetwork(model, eval_sets, masks=control, full_model_cache=cache, **eval_kwargs)
            report = model.sparsity_report(control)
            write_json(folder / RESULT_NAME, {
                "run": folder.name, "control": kind, "sparsity": float(sparsity), "source_seed": int(seeds[0]),
                "realized_sparsity": report["sparsity"], "units_kept": report["units_kept"],
                "units_total": report["units_total"], "eval": evaluation,
                "masks": {"heads": control["heads"].int().tolist(), "mlps": control["mlps"].int().tolist()}})


# --------------------------------------------------------------------------------------------------------------------
# Ablation tables on the full model
# --------------------------------------------------------------------------------------------------------------------


@dataclass
class AblationRow:
    """One ablation: which units, the accuracy per set and its change from the full model."""

    label: str
    units: list[Unit]
    kind: str  # "single", "joint" or "non_core_average"
    accuracy: dict[str, float]
    delta: dict[str, float]
    sum_of_singles: dict[str, float] | None = None
    super_additive: dict[str, bool] | None = None
    std: dict[str, float] | None = None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["units"] = [unit_label(u) for u in self.units]
        return out


@dataclass
class AblationTable:
    """The paper's Table 3: full model, single-unit ablations, joint ablations, average non-core head."""

    mode: str
    full_accuracy: dict[str, float]
    rows: list[AblationRow]
    non_core: list[AblationRow] = field(default_factory=list)

    def plot_table(self, include_sums: bool = True) -> dict[str, dict[str, float]]:
        """`{row_label: {case: delta}}` for `plotting.plot_ablation_table` (joint rows followed by the sum of
        their units' single deltas, so super-additivity is visible)."""
        table: dict[str, dict[str, float]] = {}
        for row in self.rows:
            table[row.label] = dict(row.delta)
            if include_sums and row.kind == "joint" and row.sum_of_singles is not None:
                table[f"sum of singles ({row.label})"] = dict(row.sum_of_singles)
        return table

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "full_accuracy": self.full_accuracy, "rows": [r.to_dict() for r in self.rows],
                "non_core": [r.to_dict() for r in self.non_core]}


def ablation_table(model: PrunableModel, eval_sets: Mapping[str, Any], units: Sequence[Any], *,
                   core: Sequence[Any] | None = None, joint: Sequence[Sequence[Any]] | None = None,
                   non_core_sample: int | None = None, non_core_kinds: Sequence[str] = ("heads",),
                   mode: str = "mean", seed: int = 0, batch_size: int = 32, collate_fn: Any = None,
                   collapse_to_entailment: Any = "auto", entailment_id: int = 0,
                   full_model_cache: dict | None = None, show_progress: bool = True) -> AblationTable:
    """Ablate each of `units` alone from the full model, then each group in `joint` together, and report the
    accuracy change per evaluation set next to the average change over non-core units. Members of `joint` groups
    that are not in `units` get single rows too (after those of `units`), since the sums are built from them.

    `core` (default: `units`) is excluded from the non-core pool, which holds every unit of `non_core_kinds`
    ("heads", "mlps") outside it; `non_core_sample` of them are drawn with `seed` (default: all). `joint` defaults
    to `[units]` when there are at least two units. A joint row carries `sum_of_singles` and `super_additive`
    (per set: the joint change is larger in size than the sum of the single changes, as when removing three core
    heads together costs far more than the three drops added up). `mode`: "mean", "zero" or "resample".
    """
    from tqdm.auto import tqdm

    units = [parse_unit(u) for u in units]
    core_units = {parse_unit(u) for u in (core if core is not None else units)}
    groups = [[parse_unit(u) for u in g] for g in (joint if joint is not None else ([units] if len(units) > 1 else []))]
    cache = full_model_cache if full_model_cache is not None else {}
    kwargs = dict(batch_size=batch_size, collate_fn=collate_fn, collapse_to_entailment=collapse_to_entailment,
                  entailment_id=entailment_id, full_model_cache=cache)
    with model.masks_disabled():
        full = {n: e["accuracy"] for n, e in evaluate_subnetwork(model, eval_sets, **kwargs).items()
                if "accuracy" in e}
    if not full:
        raise ValueError("ablation_table needs evaluation sets with labels (a 'label' or 'labels' column).")

    pool: list[Unit] = []
    if "heads" in non_core_kinds:
        pool += [(l, h) for l in range(model.num_layers) for h in range(model.num_heads) if (l, h) not in core_units]
    if "mlps" in non_core_kinds:
        pool += [("mlp", l) for l in range(model.num_layers) if ("mlp", l) not in core_units]
    if non_core_sample is not None and non_core_sample < len(pool):
        order = torch.randperm(len(pool), generator=torch.Generator().manual_seed(seed))[:non_core_sample]
        pool = [pool[i] for i in sorted(order.tolist())]

    singles_needed = list(dict.fromkeys([*units, *(u for g in groups for u in g), *pool]))
    progress = tqdm(total=len(singles_needed) + len(groups), disable=not show_progress, desc="ablations", leave=False)

    def accuracy_without(ablated: Sequence[Unit]) -> dict[str, float]:
        masks = ablation_masks(ablated, model.num_layers, model.num_heads)
        results = evaluate_subnetwork(model, eval_sets, masks=masks, ablation=mode, **kwargs)
        progress.update(1)
        return {n: results[n]["accuracy"] for n in full}

    single_accuracy = {u: accuracy_without([u]) for u in singles_needed}
    delta = {u: {n: single_accuracy[u][n] - full[n] for n in full} for u in singles_needed}
    members = list(dict.fromkeys(u for g in groups for u in g if u not in units))   # shown too: sums add them
    rows = [AblationRow(unit_label(u), [u], "single", single_accuracy[u], delta[u]) for u in [*units, *members]]
    for group in groups:
        accuracy = accuracy_without(group)
        joint_delta = {n: accuracy[n] - full[n] for n in full}
        sums = {n: float(sum(delta[u][n] for u in group)) for n in full}
        rows.append(AblationRow(group_label(group), group, "joint", accuracy, joint_delta, sum_of_singles=sums,
                                super_additive={n: abs(joint_delta[n]) > abs(sums[n]) + 1e-12 for n in full}))
    progress.close()
    non_core = [AblationRow(unit_label(u), [u], "single", single_accuracy[u], delta[u]) for u in pool]
    if pool:
        kind_word = "unit" if "mlps" in non_core_kinds else "head"
        rows.append(AblationRow(
            f"average non-core {kind_word} (n={len(pool)})", pool, "non_core_average",
            {n: float(np.mean([single_accuracy[u][n] for u in pool])) for n in full},
            {n: float(np.mean([delta[u][n] for u in pool])) for n in full},
            std={n: float(np.std([delta[u][n] for u in pool])) for n in full}))
    return AblationTable(mode, full, rows, non_core)
