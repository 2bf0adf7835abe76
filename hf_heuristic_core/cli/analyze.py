"""`hf-heuristic-core analyze RUNS_DIR`: write the heuristic-core report of a `prune_many` runs folder.

    hf-heuristic-core analyze runs/minilm --no_ablation            # mask statistics and figures only
    hf-heuristic-core analyze runs/minilm --max_core_units 4 --non_core_sample 12

Flags are parsed with `HfArgumentParser` (dashes and underscores both work, e.g. `--no-attention`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence
from ..errors import UsageError

logger = logging.getLogger(__name__)

DESCRIPTION = ("Report of a prune_many runs folder: accuracy per evaluation set, head frequency, the core, Spearman "
               "rho, IoU between seeds, controls, ablation table and attention patterns (report.md, report.json "
               "and figures in RUNS_DIR/report/).")


@dataclass
class AnalyzeArguments:
    """Flags of `hf-heuristic-core analyze` (the runs folder may also be given as the first positional argument)."""

    runs_dir: str | None = field(default=None, metadata={"help": "Folder written by prune_many."})
    output_dir: str | None = field(default=None, metadata={"help": "Where to write the report (default: "
                                                                   "RUNS_DIR/report)."})
    ablation: bool = field(default=True, metadata={
        "help": "Build the ablation table (needs the model and the data spec in manifest.json); --no_ablation "
                "skips it."})
    attention: bool = field(default=True, metadata={
        "help": "Measure attention patterns of core heads (needs the model); --no_attention skips it."})
    model: str | None = field(default=None, metadata={"help": "Model path / Hub id overriding manifest.json."})
    core_sparsity: float | None = field(default=None, metadata={
        "help": "Sparsity whose core is ablated and inspected (default: the highest with a non-empty core)."})
    ablation_mode: str = field(default="mean", metadata={"help": "mean, zero or resample."})
    ablation_units: str | None = field(default=None, metadata={
        "help": "Units to ablate one at a time instead of the core, comma-separated: 'L4.H0,L2.H5,L3.MLP'."})
    max_core_units: int | None = field(default=None, metadata={
        "help": "Ablate only the first N core units (in layer order), to bound the run time."})
    joint: str | None = field(default=None, metadata={
        "help": "Groups ablated together, groups separated by ';', units by ',' or '+': 'L2.H5+L3.H7+L4.H0'. "
                "Default: all ablated units together."})
    non_core_sample: int | None = field(default=None, metadata={
        "help": "Number of non-core heads averaged for comparison (default: all)."})
    attention_set: str | None = field(default=None, metadata={
        "help": "Evaluation set for attention patterns (default: the first with 'ood' in its name, else the first)."})
    attention_examples: int = field(default=128, metadata={"help": "Examples used for attention patterns."})
    heatmaps: int = field(default=3, metadata={"help": "Core heads drawn as example attention heatmaps."})
    batch_size: int | None = field(default=None, metadata={"help": "Evaluation batch size (default: as pruned)."})
    seed: int = field(default=0, metadata={"help": "Seed for sampling non-core heads."})
    device: str | None = field(default=None, metadata={"help": "Device for the model, e.g. cuda (default: cpu)."})
    subtasks: str | None = field(default=None, metadata={
        "help": "Subtask masks to compare, name=mask_folder pairs separated by commas (relative to RUNS_DIR): "
                "'sr1=sr1/sp0-seed0,sr2=sr2/sp0-seed0'. Replaces the masks of RUNS_DIR/subtasks.json, which can "
                "also record accuracies (see analysis.subtask_report)."})
    allow_unfinished: bool = field(default=False, metadata={
        "help": "Report on an unfinished runs folder (planned runs without results, e.g. an interrupted prune_many) "
                "or unfinished subtask masks; refused without it."})
    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "Write the report into a folder holding another runs folder's report or other files (nothing is "
                "deleted)."})


def _split_units(text: str | None) -> list[str] | None:
    if not text:
        return None
    return [u.strip() for u in text.replace("+", ",").split(",") if u.strip()]


def _split_groups(text: str | None) -> list[list[str]] | None:
    if text is None:
        return None
    return [units for group in text.split(";") if (units := _split_units(group))]


def parse_analyze_args(argv: Sequence[str]) -> AnalyzeArguments:
    from transformers import HfArgumentParser
    argv = list(argv)
    if argv and not argv[0].startswith("-"):
        argv = ["--runs_dir", argv[0], *argv[1:]]
    parser = HfArgumentParser(AnalyzeArguments, prog="hf-heuristic-core analyze", description=DESCRIPTION,
                              usage="hf-heuristic-core analyze RUNS_DIR [flags] (see --help)")
    (args,) = parser.parse_args_into_dataclasses(args=argv)
    if not args.runs_dir:
        parser.error("give the runs folder: hf-heuristic-core analyze RUNS_DIR")
    return args


def analyze_settings(args: AnalyzeArguments, output_dir: Path, subtasks: Any) -> Any:
    """The `AnalyzeSettings` the flags ask for (units and groups parsed from their comma forms)."""
    from ..analysis.report_settings import AnalyzeSettings  # lazy: `--help` does not load it
    return AnalyzeSettings(
        output_dir=output_dir, ablation=args.ablation, attention=args.attention, core_sparsity=args.core_sparsity,
        ablation_mode=args.ablation_mode, ablation_units=_split_units(args.ablation_units),
        max_core_units=args.max_core_units, joint=_split_groups(args.joint), non_core_sample=args.non_core_sample,
        attention_set=args.attention_set, attention_examples=args.attention_examples, heatmaps=args.heatmaps,
        model=args.model, batch_size=args.batch_size, seed=args.seed, device=args.device, subtasks=subtasks,
        allow_unfinished=args.allow_unfinished)


def _report_of(folder: Path) -> dict | None:
    """The settings of a report folder written before run records: the runs folder its report.json names."""
    import json
    try:
        runs_dir = json.loads((folder / "report.json").read_text())["runs_dir"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return {"runs_dir": str(Path(runs_dir).resolve())}


def analyze_command(argv: Sequence[str]) -> int:
    """Entry point of `hf-heuristic-core analyze`; returns the exit code."""
    from ..analysis.report import analyze  # lazy: `--help` does not load it
    from ..analysis.subtask_report import parse_subtasks_flag  # lazy: `--help` does not load it
    from ..run_folder import claim_output_dir  # lazy: `--help` does not load it
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
