"""Imports point down the tree: evaluation never pulls in the training loop (the HF `Trainer`), and a CLI module
never imports through the `cli` package that imports it."""

from __future__ import annotations

import ast
from pathlib import Path

from fresh_process import python_output

import hf_heuristic_core

PACKAGE = Path(hf_heuristic_core.__file__).parent


def test_evaluating_a_subnetwork_does_not_import_the_trainer():
    code = ("import sys, hf_heuristic_core.evaluation.subnetwork; "
            "print(sorted(m for m in ('transformers.trainer', 'hf_heuristic_core.training.trainer') "
            "if m in sys.modules))")
    assert python_output(code) == ["[]"]


def _imports_of_the_cli_package(source: str, depth: int = 1) -> list[int]:
    """Lines of `from . import x` / `from ..cli import x` / `from hf_heuristic_core.cli import x` in a cli module
    (`depth` 1: `cli/<module>.py`; 2: `cli/flags/<module>.py`, whose `from .. import x` is the cli package)."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom):
            up_to_package = node.level == depth and node.module is None
            through_parent = node.level == depth + 1 and node.module == "cli"
            absolute = node.level == 0 and node.module == "hf_heuristic_core.cli"
            if up_to_package or through_parent or absolute:
                lines.append(node.lineno)
    return lines


def test_no_cli_module_imports_through_the_cli_package():
    found = {path.name: _imports_of_the_cli_package(path.read_text())
             for path in (PACKAGE / "cli").glob("*.py") if path.name not in ("__init__.py", "__main__.py")}
    found.update({f"flags/{path.name}": _imports_of_the_cli_package(path.read_text(), depth=2)
                  for path in (PACKAGE / "cli" / "flags").glob("*.py") if path.name != "__init__.py"})
    assert len(found) > 10 and any(name.startswith("flags/") for name in found)
    assert {name: lines for name, lines in found.items() if lines} == {}
    assert _imports_of_the_cli_package("from .. import SUBCOMMANDS\nfrom ..help import x\n", depth=2) == [1]
    assert _imports_of_the_cli_package("def f():\n    from ..cli import resolve_text_columns\n") == [2]
