"""Fast help (no torch import) lists exactly the flags `HfArgumentParser` accepts, so it cannot drift from them."""

from __future__ import annotations

import contextlib
import subprocess
import sys

import pytest

from hf_heuristic_core.cli import SUBCOMMANDS, command_help
from hf_heuristic_core.cli.prune import prune_help


def _listed(text: str) -> set[str]:
    return {line.split()[0] for line in text.splitlines() if line.startswith("  --")}


def _accepted(dataclass_types) -> set[str]:
    from transformers import HfArgumentParser
    parser = HfArgumentParser(dataclass_types)
    return {option for action in parser._actions for option in action.option_strings
            if option.startswith("--") and "-" not in option[2:] and not option.startswith("--no_")} - {"--help"}


@pytest.mark.parametrize("name", ["study", "effective-size", "analyze", "export", "subtasks", "induce", "circuit"])
def test_fast_help_lists_every_accepted_flag(name):
    from hf_heuristic_core.cli.analyze import AnalyzeArguments
    from hf_heuristic_core.cli.circuit import CircuitArguments
    from hf_heuristic_core.cli.effective_size import EffectiveSizeArguments
    from hf_heuristic_core.cli.export import ExportScriptArguments
    from hf_heuristic_core.cli.induce import InductionArguments
    from hf_heuristic_core.cli.subtasks import SubtasksArguments
    from hf_heuristic_core.study.run import StudyArguments
    types = {"study": StudyArguments, "effective-size": EffectiveSizeArguments, "analyze": AnalyzeArguments,
             "export": ExportScriptArguments, "subtasks": SubtasksArguments, "induce": InductionArguments,
             "circuit": CircuitArguments}
    assert _listed(command_help(name)) == _accepted(types[name])


def test_prune_help_lists_accepted_flags_and_help_all_lists_them_all():
    from hf_heuristic_core.cli.prune import PruneScriptArguments
    from hf_heuristic_core.training.arguments import PruningArguments
    accepted = _accepted((PruneScriptArguments, PruningArguments))
    short = _listed(prune_help())
    assert short < accepted and len(short) < 80 < len(accepted)   # 73 with the memory and warm-start flags
    assert _listed(prune_help(everything=True)) >= accepted


def test_search_package_names_match_search_run():
    from hf_heuristic_core import search
    from hf_heuristic_core.search import run
    from hf_heuristic_core.search import defaults, strategies
    assert sorted(search.__all__) == sorted([*run.__all__, "STRATEGIES", "SearchStrategy", "get_strategy",
                                             "register_strategy"])
    assert search.ClimbSchedule is run.ClimbSchedule and search.DEFAULT_STRATEGY == "nested"
    assert search.STRATEGIES is strategies.STRATEGIES
    # The torch-free copies the CLI help reads are the registry's.
    assert defaults.SEARCH_STRATEGIES == run.SEARCH_STRATEGIES and defaults.DEFAULT_STEPS == run.DEFAULT_STEPS


@pytest.mark.parametrize("command", [[], *([name] for name in SUBCOMMANDS), ["prune", "--help-all"]])
def test_help_imports_neither_torch_nor_transformers(command):
    """Every help, --help-all included, stays fast: none imports torch, transformers or datasets (every subcommand,
    so a new one is checked too; circuit and finetune once loaded their run modules for --help)."""
    argv = command if "--help-all" in command else command + ["--help"]
    code = ("import sys; from hf_heuristic_core.cli import main; "
            f"assert main({argv!r}) == 0; "
            "heavy = [m for m in ('torch', 'transformers', 'datasets') if m in sys.modules]; "
            "assert not heavy, heavy")
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert completed.returncode == 0, completed.stderr[-2000:]


@pytest.mark.parametrize("command", ["prune", "study", "effective-size", "analyze", "export", "subtasks"])
def test_every_command_shows_its_own_help(command, capsys):
    """Each subcommand's --help is its own (export and subtasks once fell through to analyze's)."""
    from hf_heuristic_core.cli import main
    with contextlib.suppress(SystemExit):
        assert main([command, "--help"]) == 0
    text = capsys.readouterr().out
    assert f"hf-heuristic-core {command}" in text.splitlines()[0] or f"hf-heuristic-core {command}" in text[:300]
    if command != "analyze":
        assert "hf-heuristic-core analyze" not in text


def test_command_help_refuses_a_name_it_does_not_know():
    with pytest.raises(ValueError, match=r"No help for 'prnue': one of \["):
        command_help("prnue")
