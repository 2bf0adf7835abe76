"""FSDP2 with NCCL on two GPUs: the same checks as tests/training/test_trainer_distributed.py (which runs them on the CPU
with gloo), without the CPU shim: accelerate enables FSDP by itself on GPUs. Needs at least 2 GPUs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "training" / "fsdp_prune_script.py"


@pytest.fixture(autouse=True)
def _two_gpus():
    if torch.cuda.device_count() < 2:
        pytest.skip("FSDP across processes needs 2 GPUs (NCCL refuses two ranks on one device)")


def run(folder: Path, processes: int, batch: int, *flags: str) -> dict:
    import socket
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    args = [str(SCRIPT), "--output", str(folder), "--batch", str(batch), "--cuda", *flags]
    command = ([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}",
                f"--master_port={port}", *args] if processes > 1 else [sys.executable, *args])
    completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return torch.load(folder / "result.pt", weights_only=True)


@pytest.mark.parametrize("flags", [("--task", "seq"), ("--task", "causal", "--granularity", "weight")])
def test_fsdp_on_two_gpus_matches_one_gpu(tmp_path, flags):
    single = run(tmp_path / "single", 1, 8, *flags)
    sharded = run(tmp_path / "fsdp", 2, 4, "--fsdp", *flags)
    assert sharded["fsdp_enabled"] and sharded["device"].startswith("cuda")
    assert sharded["layout"]["trainable_sharded"] == []
    for kind, logits in single["logits"].items():
        assert torch.equal(sharded["masks"][kind], single["masks"][kind])
        torch.testing.assert_close(sharded["logits"][kind], logits, rtol=0, atol=1e-4)
    assert sharded["kl"] == pytest.approx(single["kl"], abs=1e-4)
