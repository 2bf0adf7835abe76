"""The public names and the module paths of the flat 0.1 layout keep working after the move into subpackages."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from fresh_process import python_output

import hf_heuristic_core
from hf_heuristic_core._compat import MOVED_MODULES


def test_every_public_name_resolves():
    for name in hf_heuristic_core.__all__:
        assert getattr(hf_heuristic_core, name) is not None, name


def test_effective_size_is_the_function_even_after_importing_its_old_module_path():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from hf_heuristic_core.effective_size import effective_size_per_seed  # noqa: F401
    assert callable(hf_heuristic_core.effective_size)
    assert hf_heuristic_core.effective_size({"a": 0.9}, {0.5: {"a": 0.9}}) == pytest.approx(0.5)


@pytest.mark.parametrize("old, new", sorted(MOVED_MODULES.items()))
def test_old_module_path_forwards_with_a_deprecation_warning(old, new):
    target = importlib.import_module(f"hf_heuristic_core.{new.split(',')[0]}")
    public = [n for n in getattr(target, "__all__", dir(target)) if not n.startswith("_")]
    name = public[0]
    alias = importlib.import_module(f"hf_heuristic_core.{old}")
    with pytest.warns(DeprecationWarning, match=f"moved to {target.__name__}"):
        value = getattr(alias, name)
    assert value is getattr(target, name)


def test_importing_the_package_loads_neither_torch_nor_transformers():
    code = ("import sys, hf_heuristic_core; "
            "print(sorted(m for m in ('torch', 'transformers', 'datasets') if m in sys.modules))")
    assert python_output(code) == ["[]"]


def test_a_moved_path_fails_the_test_run(tmp_path):
    """setup.cfg turns the package's own deprecation warnings into errors, so no test, README block or example can
    keep using a moved path unnoticed; a third-party DeprecationWarning does not fail the run."""
    (tmp_path / "test_uses_moved_path.py").write_text(
        "def test_old_path():\n"
        "    from hf_heuristic_core.cli_analyze import analyze_command  # noqa: F401\n")
    (tmp_path / "test_third_party.py").write_text(
        "import warnings\n\n\n"
        "def test_third_party_deprecation():\n"
        "    warnings.warn_explicit('old API', DeprecationWarning, 'lib.py', 1, module='somelib')\n")
    setup_cfg = str(Path(__file__).resolve().parents[1] / "setup.cfg")
    run = subprocess.run([sys.executable, "-m", "pytest", "-c", setup_cfg, "--rootdir", str(tmp_path), "-p",
                          "no:xdist", "-p", "no:cacheprovider", "-q", str(tmp_path)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert "1 failed, 1 passed" in run.stdout, run.stdout[-2000:]
    assert "DeprecationWarning: hf_heuristic_core.cli_analyze moved to hf_heuristic_core.cli.analyze" in run.stdout


def test_a_moved_path_with_one_home_warns_before_importing_it():
    """With the warning as an error, the old path fails before the new module (here the analyze command, which
    imports transformers' Trainer) is imported; a path moved to several modules still warns naming where the name
    was found."""
    code = ("import sys, warnings; warnings.simplefilter('error', DeprecationWarning)\n"
            "try:\n    from hf_heuristic_core.cli_analyze import analyze_command\n"
            "except DeprecationWarning as warning:\n    print(warning)\n"
            "print('hf_heuristic_core.cli.analyze' in sys.modules, 'transformers.trainer' in sys.modules)")
    message, imported = python_output(code)
    assert "hf_heuristic_core.cli_analyze moved to hf_heuristic_core.cli.analyze" in message
    assert imported == "False False"
    several = [old for old, new in MOVED_MODULES.items() if "," in new]
    for old in several[:1]:
        alias = importlib.import_module(f"hf_heuristic_core.{old}")
        name = next(n for n in dir(importlib.import_module(f"hf_heuristic_core.{MOVED_MODULES[old].split(',')[-1]}"))
                    if not n.startswith("_"))
        with pytest.warns(DeprecationWarning, match=f"hf_heuristic_core.{old} moved to hf_heuristic_core\\."):
            getattr(alias, name)


def test_deprecation_from_a_project_module_is_an_error_and_a_third_party_one_is_not():
    alias = importlib.import_module("hf_heuristic_core.mask_stats")
    with pytest.raises(DeprecationWarning, match="moved to hf_heuristic_core.analysis.mask_stats"):
        alias.core  # noqa: B018
    with pytest.raises(FutureWarning, match="soon"):  # attributed to a package module, whatever its message
        warnings.warn_explicit("soon", FutureWarning, "model.py", 1, module="hf_heuristic_core.model")
    with pytest.warns(DeprecationWarning, match="old API"):
        warnings.warn_explicit("old API", DeprecationWarning, "lib.py", 1, module="somelib")
