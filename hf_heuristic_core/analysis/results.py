"""The runs folder's result files: names, JSON, the results table, its summary and CSV.

A `prune_many` runs folder holds one `result.json` per run and per control subnetwork; everything else
(`results.json`, `results.csv`, `summary.csv`) is rebuilt from those, so an interrupted run loses nothing:

    runs_dir/
      manifest.json            model, pruning settings, data spec (so analyze can reload model and data)
      full_model.json          full-model accuracy per evaluation set
      sp50-seed0/              one mask artifact (kilobytes) + result.json per run
      controls/sp50-inverse/   result.json of each control subnetwork (its masks inside)
      results.json, results.csv, summary.csv
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch

from ..io_utils import atomic_write_text
from ..verdicts import verdict_status

__all__ = ["CONTROL_KINDS", "PruneManyResult", "collect_results", "faithfulness", "read_json", "summarize",
           "write_json", "write_results"]

MANIFEST_NAME = "manifest.json"
RESULT_NAME = "result.json"
RESULTS_NAME = "results.json"
FULL_MODEL_NAME = "full_model.json"
CONTROLS_DIR = "controls"
CONTROL_KINDS = ("random_like", "random_from_complement", "inverse")
ROW_KEYS = ("run", "sparsity", "seed", "control", "source_seed", "realized_sparsity", "units_kept", "units_total",
            "converged", "verdict", "note")
CONVERGED_FLAG = {"converged": True, "not_converged": False, "inconclusive": None}


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
    return str(value)


def _row_from_result(result: Mapping[str, Any], eval_names: Sequence[str]) -> dict[str, Any]:
    """A flat table row: run info, then accuracy per set, then agreement and KL per set."""
    row: dict[str, Any] = {k: result.get(k) for k in ROW_KEYS if k in result}
    if result.get("convergence"):
        status = verdict_status(result["convergence"])   # also right for results written before "inconclusive"
        row["verdict"], row["converged"] = status, CONVERGED_FLAG.get(status)
        row["convergence"] = result["convergence"].get("verdict")
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


def faithfulness(rows: Sequence[Mapping[str, Any]], names: Sequence[str]) -> list[dict[str, Any]]:
    """Mean agreement with the full model and mean KL to it, per sparsity and evaluation set."""
    out = []
    for sparsity in sorted({r["sparsity"] for r in rows}):
        group = [r for r in rows if r["sparsity"] == sparsity]
        for name in names:
            agreement = [r[f"agreement/{name}"] for r in group if r.get(f"agreement/{name}") is not None]
            kl = [r[f"kl/{name}"] for r in group if r.get(f"kl/{name}") is not None]
            if agreement:
                out.append({"sparsity": sparsity, "eval_set": name, "agreement": float(np.mean(agreement)),
                            "kl": float(np.mean(kl)) if kl else None})
    return out


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


def write_results(result: PruneManyResult) -> None:
    """`results.json`, `results.csv` (runs, then controls) and `summary.csv` in the runs folder."""
    write_json(result.runs_dir / RESULTS_NAME, result.to_dict())
    atomic_write_text(result.runs_dir / "results.csv", _csv_text(result.results + result.controls))
    atomic_write_text(result.runs_dir / "summary.csv", _csv_text(result.summary))
