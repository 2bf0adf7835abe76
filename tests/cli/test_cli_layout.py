"""The CLI's split (issue 39): each subcommand's flags live in a torch-free module under `cli/flags/`, which
`SUBCOMMANDS` reads for `--help`, and its run lives in `cli/<command>.py` with its imports at module top. An import
inside a function of a run module stays only with a comment saying why (an optional dependency, a circle that cannot
be broken); "`--help` does not load it" is no reason there, since `--help` never loads a run module.

`study` keeps its older layout (its flags are `study.run`'s `StudyArguments`).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest
from fresh_process import python_output

import hf_heuristic_core
from hf_heuristic_core.cli import SUBCOMMANDS, main

CLI = Path(hf_heuristic_core.__file__).parent / "cli"
HEAVY = ("torch", "transformers", "datasets")
SPLIT = {"analyze", "circuit", "effective-size", "export", "finetune", "induce", "prune", "subtasks"}
STALE_REASON = "`--help` does not load it"


def _module(path: str) -> str:
    """"cli.flags.analyze:AnalyzeArguments" -> "cli.flags.analyze"."""
    return path.partition(":")[0]


def _split_commands() -> dict[str, tuple[str, set[str]]]:
    """Command -> (its run module, the modules its help is drawn from), for every command whose help comes from
    `cli/flags/` (so a new command written the same way is checked too)."""
    found = {}
    for name, command in SUBCOMMANDS.items():
        helps = {_module(p) for p in (command.arguments, command.description, command.help) if p}
        if helps and all(m.startswith("cli.flags.") for m in helps):
            found[name] = (_module(command.run), helps)
    return found


def test_subcommands_read_help_from_flags_modules_and_run_from_run_modules():
    commands = _split_commands()
    assert set(commands) >= SPLIT, f"help of {sorted(SPLIT - set(commands))} is not drawn from cli/flags/"
    for name, (run, helps) in commands.items():
        stem = name.replace("-", "_")
        assert helps == {f"cli.flags.{stem}"}, (name, helps)
        assert run == f"cli.{stem}", (name, run)
        assert not SUBCOMMANDS[name].answers_help_itself, f"{name}: main answers its --help from the flags module"
    flag_files = {p.stem for p in (CLI / "flags").glob("*.py") if p.name != "__init__.py"}
    assert flag_files == {name.replace("-", "_") for name in commands}


def test_flags_modules_and_every_help_import_no_torch_transformers_or_datasets():
    """In a fresh interpreter: import every flags module and draw every split command's help (finetune's reads
    TrainingArguments' source without importing it); none of the heavy packages may be loaded."""
    modules = sorted(f"hf_heuristic_core.cli.flags.{p.stem}" for p in (CLI / "flags").glob("*.py"))
    code = ("import importlib, sys\n"
            f"for name in {modules!r}:\n    importlib.import_module(name)\n"
            "from hf_heuristic_core.cli import command_help\n"
            f"texts = [command_help(name) for name in {sorted(_split_commands())!r}]\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules), len(texts), min(len(t) for t in texts))")
    heavy, count, shortest = python_output(code)[-1].rsplit(" ", 2)
    assert heavy == "[]" and int(count) == len(_split_commands()) and int(shortest) > 200


def heavy_imports(source: str) -> list[int]:
    """Lines of any import (module top or inside a function) of torch, transformers or datasets."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        else:
            continue
        if any(name.split(".")[0] in HEAVY for name in names):
            lines.append(node.lineno)
    return lines


def test_no_flags_module_names_a_heavy_package():
    found = {p.name: heavy_imports(p.read_text()) for p in sorted((CLI / "flags").glob("*.py"))}
    assert {name: lines for name, lines in found.items() if lines} == {}
    assert len(found) == len(SPLIT) + 1   # one flags module per split command and the package's __init__


def test_the_heavy_import_scan_sees_each_form():
    source = ("import os\nimport torch.nn as nn\nfrom transformers import AutoConfig\nfrom .datasets import x\n"
              "def f():\n    import datasets\n    from torch import Tensor\n")
    assert heavy_imports(source) == [2, 3, 6, 7]


def unexplained_imports(source: str) -> list[int]:
    """Lines of imports inside a function (or method, or lambda) with no comment saying why: neither on the import's
    own lines nor on a comment-only line directly above. The stale reason "`--help` does not load it" counts as
    none."""
    lines = source.splitlines()

    def explained(node: ast.stmt) -> bool:
        own = [lines[i] for i in range(node.lineno - 1, node.end_lineno or node.lineno)]
        above = lines[node.lineno - 2].strip() if node.lineno >= 2 else ""
        comments = [line.split("#", 1)[1] for line in own if "#" in line]
        if above.startswith("#"):
            comments.append(above[1:])
        return any(text.strip() and STALE_REASON not in text for text in comments)

    found = []
    for outer in ast.walk(ast.parse(source)):
        if isinstance(outer, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            for node in ast.walk(outer):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and not explained(node):
                    found.append(node.lineno)
    return sorted(set(found))


def test_no_run_module_imports_inside_a_function_without_saying_why():
    runs = {run for run, _ in _split_commands().values()}
    assert len(runs) >= len(SPLIT)
    found = {run: unexplained_imports((CLI.parent / (run.replace(".", "/") + ".py")).read_text()) for run in runs}
    assert {run: lines for run, lines in found.items() if lines} == {}


def test_the_inside_import_scan_sees_each_form():
    """Unexplained: plain, in a method, in a nested function, with the stale reason above or beside it. Explained:
    a reason on the line above, beside it, or on a multi-line import's own lines. Imports at module top (and under
    `if TYPE_CHECKING:`) are left alone."""
    source = "\n".join([
        "import json",                                                   # 1  top
        "def f():",                                                      # 2
        "    import re",                                                 # 3  unexplained
        "    # matplotlib is optional (the plot extra)",                  # 4
        "    import matplotlib",                                         # 5  explained above
        "    from ..x import y  # circle: x imports this module",        # 6  explained beside
        "    from ..a import b  # lazy: `--help` does not load it",      # 7  stale
        "    # lazy: `--help` does not load it",                         # 8
        "    from ..c import d",                                         # 9  stale above
        "    from ..e import (  # circle: e imports this module",        # 10 explained on its own lines
        "        g,",                                                    # 11
        "    )",                                                         # 12
        "class A:",                                                      # 13
        "    def m(self):",                                              # 14
        "        def inner():",                                          # 15
        "            import os",                                         # 16 unexplained
        "        return inner",                                          # 17
        "from typing import TYPE_CHECKING",                              # 18 top
        "if TYPE_CHECKING:",                                             # 19
        "    import torch",                                              # 20 top (type checking)
    ])
    assert unexplained_imports(source) == [3, 7, 9, 16]


@pytest.mark.parametrize("name", ["circuit", "finetune"])
def test_main_and_the_run_print_the_same_help(name, capsys):
    """circuit and finetune had their run answer `--help`; `main` answers it now from the flags module, without
    loading the run. Called directly, the run still prints the same text."""
    from hf_heuristic_core.cli.circuit import circuit_command
    from hf_heuristic_core.cli.finetune import finetune_command
    assert main([name, "--help"]) == 0
    from_main = capsys.readouterr().out
    assert {"circuit": circuit_command, "finetune": finetune_command}[name](["--help"]) == 0
    assert capsys.readouterr().out == from_main and f"hf-heuristic-core {name}" in from_main


def test_old_import_paths_name_the_flags_modules_objects():
    """Tests, docs and users import the flags from the run modules; those names are the flags modules' own."""
    stems = sorted(name.replace("-", "_") for name in SPLIT)
    for stem in stems:
        run = importlib.import_module(f"hf_heuristic_core.cli.{stem}")
        flags = importlib.import_module(f"hf_heuristic_core.cli.flags.{stem}")
        assert flags.__all__, flags.__name__
        for name in flags.__all__:
            assert getattr(run, name) is getattr(flags, name), f"{run.__name__}.{name}"
