"""The library never imports the command line: `cli/` sits on top, and an arrow back up is an import circle waiting
to happen (`cli/induce.py` <-> `induction/runner.py` was one)."""

from __future__ import annotations

import ast
from pathlib import Path

from fresh_process import python_output

import hf_heuristic_core

PACKAGE = Path(hf_heuristic_core.__file__).parent
# Known arrows into cli/ (issue 27 lists them); remove an entry when it is fixed. None are left.
KNOWN: set[str] = set()


def _cli_imports(path: Path, package: Path = PACKAGE) -> list[str]:
    """The `cli` modules `path` imports (relative or absolute), at module top or inside functions."""
    depth = len(path.relative_to(package).parts) - 1
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                if node.level - 1 > depth:
                    continue
                base = list(path.relative_to(package).parts[:depth - (node.level - 1)])
                target = ".".join([*base, *(node.module or "").split(".")]).strip(".")
            else:
                target = (node.module or "").removeprefix("hf_heuristic_core.")
            names = [target] if node.module else [f"{target}.{a.name}".strip(".") for a in node.names]
            found += [n for n in names if n == "cli" or n.startswith("cli.")]
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("hf_heuristic_core.cli")]
    return found


def test_no_module_below_cli_imports_it():
    offenders = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel.startswith("cli/") or rel == "__init__.py" or rel in KNOWN:
            continue
        imports = _cli_imports(path)
        if imports:
            offenders[rel] = imports
    assert offenders == {}


def test_the_scan_sees_an_arrow_back_up(tmp_path):
    """The scan finds an arrow at module top and inside a function or method (`circuits/tasks.py` had one in a
    function), relative or absolute: a scan that finds nothing anywhere would pass above for nothing."""
    package = tmp_path / "hf_heuristic_core"
    probe = package / "circuits" / "tasks.py"
    probe.parent.mkdir(parents=True)
    probe.write_text("from ..cli import main\n"
                     "def load(x):\n    from ..cli.checks import load_dataset_checked\n    return x\n"
                     "class A:\n    def f(self):\n        import hf_heuristic_core.cli.prune\n")
    assert _cli_imports(probe, package) == ["cli", "cli.checks", "hf_heuristic_core.cli.prune"]


def test_the_circuit_task_loader_moved_to_the_library_and_the_old_path_still_works():
    from hf_heuristic_core.circuits import tasks
    from hf_heuristic_core.cli.checks import check_rows as old_rows, load_dataset_checked as old_load
    from hf_heuristic_core.table_checks import check_rows, load_dataset_checked

    assert old_load is load_dataset_checked is tasks.load_dataset_checked and old_rows is check_rows


def test_induction_arguments_import_without_torch():
    code = ("import sys; from hf_heuristic_core.induction.arguments import InductionArguments; "
            "import hf_heuristic_core.cli.flags.induce as c; assert c.InductionArguments is InductionArguments; "
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    assert python_output(code) == ["[]"]


def test_old_paths_still_work():
    from hf_heuristic_core.cli.induce import ARM_CHOICES, InductionArguments
    from hf_heuristic_core.induction import build_arm
    from hf_heuristic_core.induction.runner import InductionArguments as from_runner

    assert from_runner is InductionArguments and "subnetwork" in ARM_CHOICES and callable(build_arm)
