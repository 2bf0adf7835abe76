"""Test-wide settings: offline Hub, one torch thread per xdist worker, real-model fixtures."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def minilm_dir():
    """Folder of the real all-MiniLM-L6-v2 weights (installed by the README's test command)."""
    from hf_heuristic_core.offline_models import minilm_path
    return minilm_path()


@pytest.fixture(scope="session")
def smollm2_file():
    from hf_heuristic_core.offline_models import smollm2_gguf
    return smollm2_gguf()
