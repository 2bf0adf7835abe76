"""The public names and the module paths of the flat 0.1 layout keep working after the move into subpackages."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

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
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
