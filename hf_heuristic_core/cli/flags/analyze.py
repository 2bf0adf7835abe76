"""Flags of `hf-heuristic-core analyze` (torch-free: `--help` is drawn from them; the run is `cli/analyze.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["DESCRIPTION", "AnalyzeArguments"]

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
