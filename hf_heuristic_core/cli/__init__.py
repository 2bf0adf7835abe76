"""`hf-heuristic-core` command line. Each subcommand parses its flags with `HfArgumentParser`.

    hf-heuristic-core prune --model NAME_OR_PATH --dataset NAME_OR_FILES --target_sparsity 0.5 --output_dir DIR

Subcommands import their modules lazily and answer `--help` without importing torch, so help is fast. A failing
command prints one line naming the problem and the fix (`--debug` shows the traceback instead).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from ..errors import UsageError
from .checks import (
    check_model_source,
    looks_local,
    resolve_text_columns,
)
from .errors import run_reporting_errors
from .help import render_help, wants_help
from .prune import (
    TASK_CLASSES,
    PruneScriptArguments,
    format_summary,
    prune_command,
    resolve_task,
    resume_checkpoint,
    run_prune,
)

logger = logging.getLogger("hf_heuristic_core")

__all__ = [
    "SUBCOMMANDS",
    "TASK_CLASSES",
    "PruneScriptArguments",
    "command_help",
    "format_summary",
    "main",
    "parse_study_arguments",
    "prune_command",
    "resolve_task",
    "resolve_text_columns",
    "resume_checkpoint",
    "run_prune",
    "study_command",
]

SUBCOMMANDS = {
    "study": "The heuristic-core study end to end (fine-tune, track effective size, prune x seeds, analyze).",
    "finetune": "Fine-tune a base model on a dataset into the checkpoints prune and effective-size read.",
    "prune": "Learn a mask at a target sparsity for one model and dataset; writes the mask artifact.",
    "effective-size": "Effective size of every checkpoint-* folder of a fine-tuning run (resumable).",
    "analyze": "Report (tables, figures) of a folder of multi-seed pruning runs.",
    "export": "Turn a mask artifact into a smaller, faster plain model (pruned units removed, means folded).",
    "subtasks": "Compare subtask masks (weight / neuron / unit): IoU, IoMin and shared fractions per layer.",
    "induce": "Subtask Induction: transplant a subnetwork, train arms x k x seeds on the target task, report.",
    "circuit": "MIB circuits: export masks / scores, attribution baseline, faithfulness curves (CPR, CMD).",
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: hf-heuristic-core {" + ",".join(SUBCOMMANDS) + "} [flags] [--debug]\n")
        for name, text in SUBCOMMANDS.items():
            print(f"  {name:<16}{text}")
        print("\nRun `hf-heuristic-core <command> --help` for a command's flags; --debug shows tracebacks.")
        return 0
    command, rest = argv[0], argv[1:]
    if command not in SUBCOMMANDS:
        print(f"hf-heuristic-core: error: unknown command '{command}'; choose one of {sorted(SUBCOMMANDS)}.",
              file=sys.stderr)
        return 2
    if command in FAST_HELP and wants_help(rest):
        print(command_help(command))
        return 0
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    return run_reporting_errors(command, _command(command), rest)


FAST_HELP = ("study", "effective-size", "analyze", "induce", "export", "subtasks")   # prune, finetune: their own


def command_help(name: str) -> str:
    """A subcommand's help from its flag dataclasses, without importing torch (prune has its own, `prune_help`)."""
    epilog = "Dashes and underscores both work; booleans take true/false (on by default: also --no_FLAG)."
    if name == "study":
        from ..study.run import StudyArguments  # lazy: `--help` does not load it
        return render_help("hf-heuristic-core study", SUBCOMMANDS["study"], [("study", StudyArguments, None)],
                           epilog=epilog + "\n--config FILE (YAML/JSON of these fields) sets the defaults; flags win.")
    if name == "effective-size":
        # lazy: `--help` does not load it
        from .effective_size import DESCRIPTION, EffectiveSizeArguments
        return render_help("hf-heuristic-core effective-size OUTPUT_DIR", DESCRIPTION,
                           [("effective size", EffectiveSizeArguments, None)], epilog=epilog)
    if name == "induce":
        from .induce import DESCRIPTION as INDUCE  # lazy: `--help` does not load it
        from .induce import InductionArguments  # lazy: `--help` does not load it
        return render_help("hf-heuristic-core induce", INDUCE, [("induce", InductionArguments, None)], epilog=epilog)
    if name == "export":
        from .export import DESCRIPTION as EXPORT  # lazy: `--help` does not load it
        from .export import ExportScriptArguments  # lazy: `--help` does not load it
        return render_help("hf-heuristic-core export", EXPORT, [("export", ExportScriptArguments, None)],
                           epilog=epilog)
    if name == "subtasks":
        from .subtasks import DESCRIPTION as SUBTASKS  # lazy: `--help` does not load it
        from .subtasks import SubtasksArguments  # lazy: `--help` does not load it
        return render_help("hf-heuristic-core subtasks", SUBTASKS, [("subtasks", SubtasksArguments, None)],
                           epilog=epilog)
    if name == "circuit":
        from .circuit import circuit_help  # lazy: `--help` does not load it
        return circuit_help()
    if name == "finetune":
        from .finetune import finetune_help  # lazy: `--help` does not load it
        return finetune_help()
    if name != "analyze":
        raise ValueError(f"No help for {name!r}: one of {sorted(SUBCOMMANDS)}.")
    from .analyze import DESCRIPTION as ANALYZE  # lazy: `--help` does not load it
    from .analyze import AnalyzeArguments  # lazy: `--help` does not load it
    return render_help("hf-heuristic-core analyze RUNS_DIR", ANALYZE, [("analyze", AnalyzeArguments, None)],
                       epilog=epilog)


def _command(name: str) -> Callable[[list[str]], int]:
    """Subcommands import their modules lazily, so `--help` stays fast."""
    if name == "prune":
        return prune_command
    if name == "study":
        return study_command
    if name == "finetune":
        from .finetune import finetune_command  # lazy: `--help` does not load it
        return finetune_command
    if name == "export":
        from .export import export_command  # lazy: `--help` does not load it
        return export_command
    if name == "subtasks":
        from .subtasks import subtasks_command  # lazy: `--help` does not load it
        return subtasks_command
    if name == "induce":
        from .induce import induce_command  # lazy: `--help` does not load it
        return induce_command
    if name == "circuit":
        from .circuit import circuit_command  # lazy: `--help` does not load it
        return circuit_command
    if name == "effective-size":
        from .effective_size import effective_size_command  # lazy: `--help` does not load it
        return effective_size_command
    from .analyze import analyze_command  # lazy: `--help` does not load it
    return analyze_command


def parse_study_arguments(argv: Sequence[str]):
    """`--config FILE` sets the defaults; flags given on the command line win over the file."""
    import argparse

    from transformers import HfArgumentParser

    from ..study.run import StudyArguments  # lazy: `--help` does not load it
    parser = HfArgumentParser(StudyArguments, prog="hf-heuristic-core study", description=SUBCOMMANDS["study"],
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
    from ..study.run import run_study  # lazy: `--help` does not load it
    args = parse_study_arguments(argv)
    check_study_paths(args)
    summary = run_study(args)
    print(f"\nStudy written to {summary['output_dir']}:")
    print(f"  report        {Path(summary['output_dir']) / 'report.md'} (and report.json)")
    print(f"  analysis      {summary['analysis_report']} (figures next to it)")
    print(f"  mask artifacts {summary['runs_dir']}/*/")
    if summary.get("effective_size_file"):
        print(f"  effective size {summary['effective_size_file']} (+ figure)")
    print("  timings (s)   " + ", ".join(f"{k} {v:.0f}" for k, v in summary["timings_s"].items()))
    if "disk_mb" in summary:
        print(f"  disk          {summary['disk_mb']:.0f} MB under {summary['output_dir']} (fine-tuning checkpoints "
              "keep weights only, the newest also its optimizer state)")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
