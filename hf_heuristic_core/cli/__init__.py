"""`hf-heuristic-core` command line. Each subcommand parses its flags with `HfArgumentParser`.

    hf-heuristic-core prune --model NAME_OR_PATH --dataset NAME_OR_FILES --target_sparsity 0.5 --output_dir DIR

Each subcommand has a torch-free flags module (`cli/flags/<command>.py`: its flag dataclasses, their help, and its
DESCRIPTION) and a run module (`cli/<command>.py`) that imports what the run needs at its top. `SUBCOMMANDS` names
both as strings imported on use, so `--help` loads only the flags module and never torch: help is fast. A failing
command prints one line naming the problem and the fix (`--debug` shows the traceback instead).
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .checks import resolve_text_columns
from .errors import run_reporting_errors
from .flags.prune import TASK_CLASSES, PruneScriptArguments
from .help import render_help, wants_help

# The run modules' names this package has always exported, imported (with torch) when first used: `--help` never
# loads them.
_RUN_NAMES = {**dict.fromkeys(("format_summary", "prune_command", "resolve_task", "resume_checkpoint", "run_prune"),
                              ".prune"),
              **dict.fromkeys(("check_study_paths", "parse_study_arguments", "study_command"), ".study")}


def __getattr__(name: str) -> Any:
    if name in _RUN_NAMES:
        return getattr(importlib.import_module(_RUN_NAMES[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

logger = logging.getLogger("hf_heuristic_core")

__all__ = [
    "SUBCOMMANDS",
    "TASK_CLASSES",
    "PruneScriptArguments",
    "Subcommand",
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

EPILOG = "Dashes and underscores both work; booleans take true/false (on by default: also --no_FLAG)."


@dataclass(frozen=True)
class Subcommand:
    """One subcommand: the line the command's `--help` lists, where its run lives, and how its own `--help` is made.
    Names are "module:attribute" paths inside `hf_heuristic_core`, imported on use: `arguments`, `description` and
    `help` point into torch-free flags modules (`cli/flags/`), so `--help` never loads torch; `run` at the run module,
    which may."""

    summary: str
    run: str
    usage: str = ""                    # commands whose flags are one dataclass: `--help` rendered from it
    arguments: str | None = None       # "module:Class" of that dataclass
    description: str | None = None     # "module:NAME" of the help's description (default: the summary)
    epilog: str = ""                   # added below the common epilog
    help: str | None = None            # "module:function" building the help text of the other commands
    help_all: str | None = None        # "module:function" for `--help-all` (every flag), where there is one
    answers_help_itself: bool = False  # the run answers --help itself (its own parser or sub-actions)


SUBCOMMANDS: dict[str, Subcommand] = {
    "study": Subcommand(
        "The heuristic-core study end to end (fine-tune, track effective size, prune x seeds, analyze).",
        run="cli.study:study_command", usage="hf-heuristic-core study", arguments="study.run:StudyArguments",
        epilog="--config FILE (YAML/JSON of these fields) sets the defaults; flags win."),
    "finetune": Subcommand(
        "Fine-tune a base model on a dataset into the checkpoints prune and effective-size read.",
        run="cli.finetune:finetune_command", help="cli.flags.finetune:finetune_help"),
    "prune": Subcommand(
        "Learn a mask at a target sparsity for one model and dataset; writes the mask artifact.",
        run="cli.prune:prune_command", help="cli.flags.prune:prune_help",
        help_all="cli.flags.prune:prune_help_all"),
    "effective-size": Subcommand(
        "Effective size of every checkpoint-* folder of a fine-tuning run (resumable).",
        run="cli.effective_size:effective_size_command", usage="hf-heuristic-core effective-size OUTPUT_DIR",
        arguments="cli.flags.effective_size:EffectiveSizeArguments",
        description="cli.flags.effective_size:DESCRIPTION"),
    "analyze": Subcommand(
        "Report (tables, figures) of a folder of multi-seed pruning runs.",
        run="cli.analyze:analyze_command", usage="hf-heuristic-core analyze RUNS_DIR",
        arguments="cli.flags.analyze:AnalyzeArguments", description="cli.flags.analyze:DESCRIPTION"),
    "export": Subcommand(
        "Turn a mask artifact into a smaller, faster plain model (pruned units removed, means folded).",
        run="cli.export:export_command", usage="hf-heuristic-core export",
        arguments="cli.flags.export:ExportScriptArguments", description="cli.flags.export:DESCRIPTION"),
    "subtasks": Subcommand(
        "Compare subtask masks (weight / neuron / unit): IoU, IoMin and shared fractions per layer.",
        run="cli.subtasks:subtasks_command", usage="hf-heuristic-core subtasks",
        arguments="cli.flags.subtasks:SubtasksArguments", description="cli.flags.subtasks:DESCRIPTION"),
    "induce": Subcommand(
        "Subtask Induction: transplant a subnetwork, train arms x k x seeds on the target task, report.",
        run="cli.induce:induce_command", usage="hf-heuristic-core induce",
        arguments="cli.flags.induce:InductionArguments", description="cli.flags.induce:DESCRIPTION"),
    "circuit": Subcommand(
        "MIB circuits: export masks / scores, attribution baseline, faithfulness curves (CPR, CMD).",
        run="cli.circuit:circuit_command", help="cli.flags.circuit:circuit_help"),
}


def _load(path: str) -> Any:
    """The attribute behind a "module:attribute" path inside the package (imported now)."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(f"hf_heuristic_core.{module}"), attribute)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: hf-heuristic-core {" + ",".join(SUBCOMMANDS) + "} [flags] [--debug]\n")
        for name, command in SUBCOMMANDS.items():
            print(f"  {name:<16}{command.summary}")
        print("\nRun `hf-heuristic-core <command> --help` for a command's flags; --debug shows tracebacks.")
        return 0
    name, rest = argv[0], argv[1:]
    command = SUBCOMMANDS.get(name)
    if command is None:
        print(f"hf-heuristic-core: error: unknown command '{name}'; choose one of {sorted(SUBCOMMANDS)}.",
              file=sys.stderr)
        return 2
    if not command.answers_help_itself and command.help_all and wants_help(rest, ("--help-all",)):
        print(_load(command.help_all)())
        return 0
    if not command.answers_help_itself and wants_help(rest):
        print(command_help(name))
        return 0
    logging.basicConfig(format="%(asctime)s %(levelname)s %(name)s: %(message)s", level=logging.INFO)
    return run_reporting_errors(name, _load(command.run), rest)


def command_help(name: str) -> str:
    """A subcommand's help from its flag dataclass or its help function, without importing torch."""
    command = SUBCOMMANDS.get(name)
    if command is None or (command.help is None and command.arguments is None):
        raise ValueError(f"No help for {name!r}: one of {sorted(SUBCOMMANDS)}.")
    if command.help is not None:
        return _load(command.help)()
    description = _load(command.description) if command.description else command.summary
    epilog = EPILOG + (f"\n{command.epilog}" if command.epilog else "")
    return render_help(command.usage, description, [(name.replace("-", " "), _load(command.arguments), None)],
                       epilog=epilog)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
