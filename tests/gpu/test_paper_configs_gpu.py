"""The example configs end to end on a tiny slice with `device: cuda`, as the real runs will use it (the CPU version:
tests/examples/test_paper_configs.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from test_paper_configs import CONFIGS, check_study, run_example  # noqa: E402


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_example_config_runs_end_to_end_on_the_gpu(name, tmp_path, monkeypatch):
    out, settings = run_example(name, tmp_path, "cuda", monkeypatch)
    check_study(out, settings, "cuda")
