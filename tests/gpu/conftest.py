"""tests/gpu: the GPU checks of issue #28 (equivalence, a training step, memory, FSDP, the example configs,
torch.compile). Every test here is skipped without CUDA, so the CPU suite stays as it is; on a GPU machine run

    HF_HUB_OFFLINE=1 python -m pytest tests/gpu -p no:xdist -q
"""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _needs_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (tests/gpu runs only where torch.cuda.is_available())")
    torch.manual_seed(0)
    yield
    torch.cuda.empty_cache()


@pytest.fixture
def cuda() -> torch.device:
    return torch.device("cuda")
