"""What a fresh interpreter loads: the tests that a first import stays light (no torch, no Trainer) run their code in
a new `python -c` process, since this test process has imported everything long before."""

from __future__ import annotations

import subprocess
import sys

__all__ = ["python_output"]


def python_output(code: str) -> list[str]:
    """The stdout lines of `python -c code` in a fresh interpreter (raises if it fails)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
