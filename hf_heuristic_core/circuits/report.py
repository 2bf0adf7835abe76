"""Faithfulness curves as a file (`curves.json` + figure), and the circuit section of `analyze`'s report.

`curves_document` computes MIB's curve of each ranking (plus random rankings, the chance baseline) on one data set and
returns a JSON-ready document; `write_curves` saves it with its figure. `analyze RUNS_DIR` reports
`RUNS_DIR/circuits/curves.json` when it exists (written by `hf-heuristic-core circuit faithfulness --runs_dir
RUNS_DIR`, or by `analyze(..., circuits=True)` with the model loaded): a table of CPR and CMD per group of rankings
(mean and min-max over its members, e.g. the seeds of one sparsity) and f at each size.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._keywords import settings_from_keywords
from ..io_utils import atomic_write_text
from .faithfulness import CurveSettings, FaithfulnessCurve, faithfulness_curves
from .ranking import random_scores, size_label
from ..plotting.circuits import plot_faithfulness_curves
from .sources import load_unit_scores

__all__ = ["CIRCUITS_DIR", "CURVES_NAME", "circuit_markdown", "circuit_section", "curves_document",
           "runs_curves", "write_curves"]

CIRCUITS_DIR = "circuits"
CURVES_NAME = "curves.json"
FIGURE_STEM = "faithfulness_curves"
RANDOM_GROUP = "random ranking"


def curves_document(prunable: Any, data: Any, rankings: Mapping[str, Mapping[str, Any]],
                    groups: Mapping[str, str] | None = None, settings: CurveSettings | None = None, *,
                    random_seeds: Sequence[int] = (0, 1, 2), batch_size: int = 16, collate_fn: Any = None,
                    description: Mapping[str, Any] | None = None, **keywords: Any) -> dict[str, Any]:
    """Curves of `rankings` (name -> scores by kind) and of random rankings, with each curve's group. The curve
    `settings` (ablation, sizes, metric) travel as one `CurveSettings`; its fields are also accepted as keywords."""
    settings = settings_from_keywords("curves_document", CurveSettings, settings, keywords)
    groups = dict(groups or {name: name for name in rankings})
    everything = dict(rankings)
    for seed in random_seeds:
        name = f"random-seed{seed}"
        everything[name] = random_scores(prunable.mask_shapes(), seed)
        groups[name] = RANDOM_GROUP
    curves = faithfulness_curves(prunable, data, everything, settings, batch_size=batch_size, collate_fn=collate_fn)
    first = next(iter(curves.values()))
    return {"metric": first.metric, "ablation": first.ablation, "sizes": list(first.sizes), "m_full": first.m_full,
            "m_empty": first.m_empty, "examples": first.examples, "n_units": first.n_units,
            "description": dict(description or {}),
            "curves": {name: {**curve.to_dict(), "group": groups.get(name, name)} for name, curve in curves.items()}}


def write_curves(output_dir: str | os.PathLike, document: Mapping[str, Any]) -> Path:
    """`curves.json` and `faithfulness_curves.png/.pdf` (one line per group) in `output_dir`; returns the figure."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / CURVES_NAME, json.dumps(document, indent=2) + "\n")
    plot_faithfulness_curves(_by_group(document), path=out / FIGURE_STEM,
                             title=f"Faithfulness over circuit size ({document['ablation']} ablation)").clear()
    return out / f"{FIGURE_STEM}.png"


def runs_curves(runs_dir: str | os.PathLike, results: Sequence[Mapping[str, Any]], prunable: Any, data: Any,
                data_name: str, **kwargs: Any) -> dict[str, Any]:
    """Curves of every run of a `prune_many` folder (ranked by its logits), written to `RUNS_DIR/circuits/`."""
    runs_dir = Path(runs_dir)
    rankings = {row["run"]: load_unit_scores(runs_dir / row["run"], prunable.mask_shapes()) for row in results}
    groups = {row["run"]: f"learned masks, {row['sparsity']:.0%} sparsity" for row in results}
    document = curves_document(prunable, data, rankings, groups, description={"eval_set": data_name}, **kwargs)
    write_curves(runs_dir / CIRCUITS_DIR, document)
    return document


def _by_group(document: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = {}
    for curve in document["curves"].values():
        grouped.setdefault(curve.get("group") or curve["name"], []).append(curve)
    return grouped


def circuit_section(runs_dir: str | os.PathLike, report_dir: str | os.PathLike) -> dict[str, Any] | None:
    """The report section of `RUNS_DIR/circuits/curves.json` (None when there is no such file)."""
    path = Path(runs_dir) / CIRCUITS_DIR / CURVES_NAME
    if not path.is_file():
        return None
    document = json.loads(path.read_text())
    rows = []
    for group, curves in _by_group(document).items():
        cprs = [c["cpr"] for c in curves]
        cmds = [c["cmd"] for c in curves]
        # Curves saved before both rankings were drawn: their `cmd` is the signed ranking's, not MIB's.
        mib_cmd = all(c.get("cmd_signed_ranking") is not None for c in curves)
        per_size = [sum(c["faithfulness"][i] for c in curves) / len(curves) for i in range(len(document["sizes"]))]
        rows.append({"group": group, "n": len(curves), "cpr_mean": sum(cprs) / len(cprs), "cpr_min": min(cprs),
                     "cpr_max": max(cprs), "cmd_mean": sum(cmds) / len(cmds), "cmd_min": min(cmds),
                     "cmd_max": max(cmds), "mib_cmd": mib_cmd, "faithfulness": per_size,
                     "warnings": sorted({w for c in curves for w in c.get("warnings", [])})})
    report_dir = Path(report_dir)
    plot_faithfulness_curves(_by_group(document), path=report_dir / FIGURE_STEM,
                             title=f"Faithfulness over circuit size ({document['ablation']} ablation)").clear()
    return {"source": str(path), "metric": document["metric"], "ablation": document["ablation"],
            "sizes": document["sizes"], "m_full": document["m_full"], "m_empty": document["m_empty"],
            "examples": document["examples"], "description": document.get("description", {}), "rows": rows,
            "figure": f"{FIGURE_STEM}.png"}


def _fmt(value: float) -> str:
    return "nan" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.3f}"


def circuit_markdown(section: Mapping[str, Any] | None) -> list[str]:
    """Markdown lines of the circuit section (empty without one)."""
    if not section:
        return []
    lines = ["", "## Circuits: faithfulness over circuit size (MIB)", "",
             f"From `{section['source']}`: {section['examples']} examples, metric `{section['metric']}` (logit "
             f"difference), {section['ablation']} ablation of every head and MLP block outside the circuit; "
             f"m(full) = {section['m_full']:.4g}, m(empty) = {section['m_empty']:.4g}. "
             "f = (m(C) - m(empty)) / (m(full) - m(empty)); CPR = area under f of the signed ranking (higher is "
             "better), CMD = area under |1 - f| of the |score| ranking (lower is better), as MIB's print_results "
             "reports them, by MIB's trapezoid rule over the sizes below on a linear axis. Circuit sizes "
             "count heads and MLP blocks (int(p * n) units, as MIB counts nodes); the token embeddings are never "
             "ablated (MIB's empty circuit ablates them too, so its m(empty) differs).", "",
             "| rankings | n | CPR mean (min-max) | CMD mean (min-max) |", "|---|---|---|---|"]
    for row in section["rows"]:
        lines.append(f"| {row['group']} | {row['n']} | {_fmt(row['cpr_mean'])} ({_fmt(row['cpr_min'])}-"
                     f"{_fmt(row['cpr_max'])}) | {_fmt(row['cmd_mean'])} ({_fmt(row['cmd_min'])}-"
                     f"{_fmt(row['cmd_max'])}) |")
    sizes = section["sizes"]
    lines += ["", "Mean f per circuit size:", "",
              "| rankings | " + " | ".join(size_label(s) for s in sizes) + " |",
              "|---|" + "---|" * len(sizes)]
    for row in section["rows"]:
        lines.append(f"| {row['group']} | " + " | ".join(_fmt(v) for v in row["faithfulness"]) + " |")
    warnings = sorted({w for row in section["rows"] for w in row["warnings"]})
    old = [row["group"] for row in section["rows"] if not row.get("mib_cmd", False)]
    if old:
        warnings.append(f"The CMD of {', '.join(old)} is that of the signed ranking, not MIB's (|score| ranking): "
                        f"{section['source']} was written by an earlier version; run `circuit faithfulness` again.")
    if warnings:
        lines += ["", *[f"**Warning:** {w}" for w in warnings]]
    lines += ["", f"![faithfulness over circuit size]({section['figure']})"]
    return lines


def curve_objects(document: Mapping[str, Any]) -> dict[str, FaithfulnessCurve]:
    """The curves of a document as `FaithfulnessCurve` objects."""
    return {name: FaithfulnessCurve.from_dict(curve) for name, curve in document["curves"].items()}
