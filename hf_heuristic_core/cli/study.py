"""`hf-heuristic-core study`: the heuristic-core study end to end (fine-tune, track effective size, prune x seeds,
analyze). Its flags are `study.run.StudyArguments` (torch-free, so `--help` is drawn from them); this is the run.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from transformers import HfArgumentParser

from ..errors import UsageError
from ..study.run import StudyArguments, run_study
from .checks import check_model_source, looks_local

__all__ = ["check_study_paths", "parse_study_arguments", "study_command"]


def parse_study_arguments(argv: Sequence[str]):
    """`--config FILE` sets the defaults; flags given on the command line win over the file."""
    # `--help` is answered before this parser (cli.main, from StudyArguments); argparse shows only the usage line.
    parser = HfArgumentParser(StudyArguments, prog="hf-heuristic-core study",
                              usage="hf-heuristic-core study [--config FILE] [flags] (see --help)")
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config")
    known, rest = pre.parse_known_args(list(argv))
    if known.config:
        parser.set_defaults(**StudyArguments.read_config(known.config))
    (args,) = parser.parse_args_into_dataclasses(args=rest)
    args.config = known.config
    return args


def check_study_paths(args) -> None:
    """A local model folder or data path that does not exist is named now, not by a Hub repo-id error later."""
    if args.model != "minilm":
        check_model_source(args.model, reads_gguf=False)
    for flag in ("train", "id_eval", "ood_eval"):
        value = getattr(args, flag)
        if value and looks_local(value) and not Path(value).expanduser().exists():
            raise UsageError(f"--{flag} {value}: no such file or folder; check the path, or pass a Hub dataset id.")


def study_command(argv: Sequence[str]) -> int:
    args = parse_study_arguments(argv)
    check_study_paths(args)
    summary = run_study(args)
    print(f"\nStudy written to {summary['output_dir']}:")
    print(f"  report        {Path(summary['output_dir']) / 'report.md'} (and report.json)")
    if summary["analysis_report"]:
        print(f"  analysis      {summary['analysis_report']} (figures next to it)")
    else:
        print(f"  analysis      not run (--no_analyze): hf-heuristic-core analyze {summary['runs_dir']}")
    print(f"  mask artifacts {summary['runs_dir']}/*/")
    if summary.get("effective_size_file"):
        print(f"  effective size {summary['effective_size_file']} (+ figure)")
    print("  timings (s)   " + ", ".join(f"{k} {v:.0f}" for k, v in summary["timings_s"].items()))
    if "disk_mb" in summary:
        print(f"  disk          {summary['disk_mb']:.0f} MB under {summary['output_dir']} (fine-tuning checkpoints "
              "keep weights only, the newest also its optimizer state)")
    return 0
