"""`hf-heuristic-core analyze RUNS_DIR`: write the heuristic-core report of a `prune_many` runs folder.

    hf-heuristic-core analyze runs/minilm --no_ablation            # mask statistics and figures only
    hf-heuristic-core analyze runs/minilm --max_core_units 4 --non_core_sample 12

Flags are parsed with `HfArgumentParser` (dashes and underscores both work, e.g. `--no-attention`); they and
`--help` live in `cli/flags/analyze.py`, which imports no torch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformers import HfArgumentParser

from ..analysis.report import analyze
from ..analysis.report_settings import AnalyzeSettings
from ..analysis.subtask_report import parse_subtasks_flag
from ..errors import UsageError
from ..run_folder import claim_output_dir
from .flags.analyze import DESCRIPTION, AnalyzeArguments

__all__ = ["DESCRIPTION", "AnalyzeArguments", "analyze_command", "analyze_settings", "parse_analyze_args"]

logger = logging.getLogger(__name__)


def _split_units(text: str | None) -> list[str] | None:
    if not text:
        return None
    return [u.strip() for u in text.replace("+", ",").split(",") if u.strip()]


def _split_groups(text: str | None) -> list[list[str]] | None:
    if text is None:
        return None
    return [units for group in text.split(";") if (units := _split_units(group))]


def parse_analyze_args(argv: Sequence[str]) -> AnalyzeArguments:
    argv = list(argv)
    if argv and not argv[0].startswith("-"):
        argv = ["--runs_dir", argv[0], *argv[1:]]
    parser = HfArgumentParser(AnalyzeArguments, prog="hf-heuristic-core analyze", description=DESCRIPTION,
                              usage="hf-heuristic-core analyze RUNS_DIR [flags] (see --help)")
    (args,) = parser.parse_args_into_dataclasses(args=argv)
    if not args.runs_dir:
        parser.error("give the runs folder: hf-heuristic-core analyze RUNS_DIR")
    return args


def analyze_settings(args: AnalyzeArguments, output_dir: Path, subtasks: Any) -> AnalyzeSettings:
    """The `AnalyzeSettings` the flags ask for (units and groups parsed from their comma forms)."""
    return AnalyzeSettings(
        output_dir=output_dir, ablation=args.ablation, attention=args.attention, core_sparsity=args.core_sparsity,
        ablation_mode=args.ablation_mode, ablation_units=_split_units(args.ablation_units),
        max_core_units=args.max_core_units, joint=_split_groups(args.joint), non_core_sample=args.non_core_sample,
        attention_set=args.attention_set, attention_examples=args.attention_examples, heatmaps=args.heatmaps,
        model=args.model, batch_size=args.batch_size, seed=args.seed, device=args.device, subtasks=subtasks,
        allow_unfinished=args.allow_unfinished)


def _report_of(folder: Path) -> dict | None:
    """The settings of a report folder written before run records: the runs folder its report.json names."""
    try:
        runs_dir = json.loads((folder / "report.json").read_text())["runs_dir"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return {"runs_dir": str(Path(runs_dir).resolve())}


def analyze_command(argv: Sequence[str]) -> int:
    """Entry point of `hf-heuristic-core analyze`; returns the exit code."""
    args = parse_analyze_args(argv)
    if not Path(args.runs_dir).is_dir():
        raise UsageError(f"analyze {args.runs_dir}: no such folder; pass the runs folder prune_many (or the study's "
                         "runs/) wrote.")
    subtasks = parse_subtasks_flag(args.subtasks)
    out = Path(args.output_dir) if args.output_dir else Path(args.runs_dir) / "report"
    inputs = [("RUNS_DIR", args.runs_dir), ("--model", args.model)]
    inputs += [("--subtasks", str(Path(args.runs_dir) / folder)) for folder in (subtasks or {}).values()]
    with claim_output_dir(out, "analyze", {"runs_dir": str(Path(args.runs_dir).resolve())},
                          overwrite=args.overwrite_output_dir, inputs=inputs, legacy_settings=_report_of) as claim:
        report = analyze(args.runs_dir, analyze_settings(args, out, subtasks))
        claim.finish()
    what = f"{len(report['results'])} subnetworks" if report["results"] else "subtask masks only"
    print(f"Report: {out / 'report.md'} ({what}, {len(report['figures'])} figures)")
    counts = report.get("verdicts")
    if counts:
        print("  convergence checks: " + ", ".join(f"{counts[key]} {key.replace('_', ' ')}" for key in counts))
    for run in report.get("unfinished") or []:
        print(f"  WARNING: planned run {run} has no result (unfinished runs folder, --allow_unfinished)")
    if "subtasks" in report:
        section = report["subtasks"]
        print("  subtask masks: shared fraction (total) " + ", ".join(
            f"{n} {section['sharing'][n]['total']:.3f}" for n in section["names"]))
    for row in report["summary"]:
        print(f"  {row['sparsity']:.0%} {row['eval_set']:<24} full {100 * (row['full_model'] or 0):5.1f}  "
              f"subnetworks {100 * row['min']:5.1f}-{100 * row['max']:5.1f} (mean {100 * row['mean']:.1f})")
    return 0
