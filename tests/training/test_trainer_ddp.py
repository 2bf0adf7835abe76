"""DDP on the CPU: `PruningTrainer` under torchrun with 2 processes (gloo, per-device batch 4) must learn the masks of
a single process with the same global batch (8), same data and seed.

Why they can be equal: the mask-noise generator (`prunable.generator`) is seeded with `args.seed` on every rank and is
advanced once per forward pass, so both ranks draw the same z as the single process; accelerate shards each global
batch between the ranks (rank 0 the first 4 examples, rank 1 the next 4), and DDP averages the gradients, so a per-rank
batchmean KL averages to the global batchmean. The helper script also records the examples each rank saw, so a failure
says whether the data or the masks differ.

Launching the processes is most of the time (~10-15 s a launch on 2 cores): the module's cases share two launches,
one single process for the references and one torchrun launch that runs the three DDP cases in turn (fresh model,
Trainer and seed each; `--case` in the helper script). The module is marked slow (it is not skipped).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("ddp_prune_script.py")
REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                        "ACCELERATE_USE_CPU", "CUDA_VISIBLE_DEVICES")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               CUDA_VISIBLE_DEVICES="")
    return env


def launch(script: Path, output: Path, batch: int, processes: int, runs: dict[str, str]) -> dict[str, dict]:
    """One launch of a helper script (under torchrun when `processes` > 1) running `runs` (name -> the case's flags)
    in turn: per case, rank 0's result plus what each rank saw."""
    script_args = [str(script), "--output", str(output), "--batch", str(batch),
                   *(f"--case={name}={flags}" for name, flags in runs.items())]
    if processes > 1:
        command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}", "--nnodes=1",
                   "--master_addr=127.0.0.1", f"--master_port={_free_port()}", *script_args]
    else:
        command = [sys.executable, *script_args]
    completed = subprocess.run(command, cwd=REPO, env=_environment(), capture_output=True, text=True, timeout=600)
    if completed.returncode != 0:
        lines = completed.stderr.splitlines()
        errors = [line[:600] for line in lines if line.startswith("[rank0]") and
                  ("Error" in line or "marked as ready" in line)] or \
            [line[:600] for line in lines if "Error" in line] or lines[-20:]
        pytest.fail(f"{' '.join(command[:4])} ... exited with {completed.returncode}; rank 0 says:\n"
                    + "\n".join(errors[-6:]))
    results = {}
    for name in runs:
        result = torch.load(output / name / "result.pt", weights_only=True)
        result["seen"] = [torch.load(output / name / f"seen-rank{rank}.pt", weights_only=True)
                          for rank in range(processes)]
        result["folder"] = output / name
        results[name] = result
    return results


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    """The single-process references (global batch 8, one per task) and the three DDP cases (2 x 4)."""
    folder = tmp_path_factory.mktemp("ddp")
    single = launch(SCRIPT, folder / "single", batch=8, processes=1,
                    runs={"seq": "--task seq", "causal": "--task causal"})
    ddp = launch(SCRIPT, folder / "ddp", batch=4, processes=2,
                 runs={"seq": "--task seq", "seq-find-unused-off": "--task seq --find-unused false",
                       "causal-find-unused-off": "--task causal --find-unused false"})
    return {**{f"single-{name}": result for name, result in single.items()},
            **{f"ddp-{name}": result for name, result in ddp.items()}}


def assert_same_run(ddp: dict, single: dict) -> None:
    assert ddp["world_size"] == 2 and single["world_size"] == 1
    # Data: at every step the two ranks together saw exactly the examples of the single process, rank 0 the first
    # half of its batch and rank 1 the second half.
    rank0, rank1 = ddp["seen"]
    assert len(rank0) == len(rank1) == len(single["seen"][0])
    for step, full in enumerate(single["seen"][0]):
        assert rank0[step] + rank1[step] == full, f"step {step}: ranks saw {rank0[step]} + {rank1[step]}, single {full}"
    for kind in ("heads", "mlps"):
        assert torch.equal(ddp["masks"][kind], single["masks"][kind]), kind
        torch.testing.assert_close(ddp["logits"][kind], single["logits"][kind], atol=1e-4, rtol=0)
    assert ddp["lambda_1"] == pytest.approx(single["lambda_1"], abs=1e-4)
    assert ddp["lambda_2"] == pytest.approx(single["lambda_2"], abs=1e-4)


def test_ddp_two_processes_match_single_process(runs):
    """Defaults only, as a user would run it: `torchrun --nproc_per_node=2` with PruningArguments(ddp_backend='gloo')."""
    assert_same_run(runs["ddp-seq"], runs["single-seq"])


def test_ddp_matches_single_process_with_find_unused_parameters_off(runs):
    """The same run with `ddp_find_unused_parameters=False`: isolates the sharding / noise / averaging semantics from
    DDP's unused-parameter search (which the multipliers, used outside the forward pass, trip over)."""
    assert_same_run(runs["ddp-seq-find-unused-off"], runs["single-seq"])


def test_ddp_causal_lm_with_padding_matches_single_process(runs):
    """Per-position KL is the mean over the real positions of the global batch; the two ranks hold different numbers
    of real tokens, so averaging two per-rank means is not that mean."""
    assert_same_run(runs["ddp-causal-find-unused-off"], runs["single-causal"])
