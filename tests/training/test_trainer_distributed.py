"""DDP and FSDP2 on the CPU: `PruningTrainer` under torchrun with 2 processes (gloo, per-device batch 4) must learn
the masks of a single process with the same global batch (8), same data and seed, and log its KL; a run resumed from a
sharded checkpoint must end where the uninterrupted run ends; the FSDP example runs under torchrun.

DDP. Why the runs can be equal: the mask-noise generator (`prunable.generator`) is seeded with `args.seed` on every
rank and is advanced once per forward pass, so both ranks draw the same z as the single process; accelerate shards
each global batch between the ranks (rank 0 the first 4 examples, rank 1 the next 4), and DDP averages the gradients,
so a per-rank batchmean KL averages to the global batchmean. The helper scripts also record the examples each rank
saw, so a failure says whether the data or the masks differ.

FSDP. Sharded through the Trainer's own FSDP integration (accelerate's `fsdp2_prepare_model`, torch's
`fully_shard`). accelerate 1.15 keeps the FSDP plugin only on accelerators and runs DDP on a multi-process CPU run
instead (`training.sharding.ACCELERATE_CPU_FALLBACK`); fsdp_prune_script.py flips that one decision back, so nothing
but the device differs from a GPU run (the same checks on GPUs: tests/gpu/test_fsdp_gpu.py).

Launching the processes is most of the time (a launch costs ~10-20 s of imports on 2 cores, the cases a second or
two): the single-process references of both share one process and the five two-process cases one torchrun launch
(distributed_prune_script.py runs each case with its helper, ddp_prune_script.py or fsdp_prune_script.py, with a
fresh model, Trainer and seed). The resumed run is a launch of its own (fresh processes are what it tests), and so is
the example. The module is marked slow (it is not skipped).
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("distributed_prune_script.py")
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
    """One launch of a helper script (under torchrun when `processes` > 1) running `runs` (name -> the case's helper
    and flags, e.g. "ddp --task seq") in turn: per case, rank 0's result plus what each rank saw."""
    script_args = [str(script), "--output", str(output), "--batch", str(batch),
                   *(f"--case={name}={flags}" for name, flags in runs.items())]
    if processes > 1:
        command = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={processes}", "--nnodes=1",
                   "--master_addr=127.0.0.1", f"--master_port={_free_port()}", *script_args]
    else:
        command = [sys.executable, *script_args]
    completed = subprocess.run(command, check=False, cwd=REPO, env=_environment(), capture_output=True, text=True,
                               timeout=600)
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


WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "pytorch_model_fsdp.bin", "pytorch_model_fsdp_0")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    """The single-process references (global batch 8) in one process, the three DDP and two FSDP cases (2 x 4) in
    one torchrun launch, DDP first (see distributed_prune_script.py)."""
    folder = tmp_path_factory.mktemp("distributed")
    single = launch(SCRIPT, folder / "single", batch=8, processes=1,
                    runs={"ddp-seq": "ddp --task seq", "ddp-causal": "ddp --task causal",
                          "fsdp-seq-unit": "fsdp --task seq",
                          "fsdp-causal-weight": "fsdp --task causal --granularity weight"})
    two = launch(SCRIPT, folder / "two", batch=4, processes=2,
                 runs={"ddp-seq": "ddp --task seq", "ddp-seq-find-unused-off": "ddp --task seq --find-unused false",
                       "ddp-causal-find-unused-off": "ddp --task causal --find-unused false",
                       "fsdp-seq-unit": "fsdp --task seq --fsdp --save-steps 3",
                       "fsdp-causal-weight": "fsdp --task causal --granularity weight --fsdp"})
    return {**{f"single-{name}": result for name, result in single.items()}, **two}


def assert_same_ddp_run(ddp: dict, single: dict) -> None:
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
    assert_same_ddp_run(runs["ddp-seq"], runs["single-ddp-seq"])


def test_ddp_matches_single_process_with_find_unused_parameters_off(runs):
    """The same run with `ddp_find_unused_parameters=False`: isolates the sharding / noise / averaging semantics from
    DDP's unused-parameter search (which the multipliers, used outside the forward pass, trip over)."""
    assert_same_ddp_run(runs["ddp-seq-find-unused-off"], runs["single-ddp-seq"])


def test_ddp_causal_lm_with_padding_matches_single_process(runs):
    """Per-position KL is the mean over the real positions of the global batch; the two ranks hold different numbers
    of real tokens, so averaging two per-rank means is not that mean."""
    assert_same_ddp_run(runs["ddp-causal-find-unused-off"], runs["single-ddp-causal"])


def assert_same_fsdp_run(fsdp: dict, single: dict, atol: float = 1e-4) -> None:
    assert fsdp["fsdp_enabled"] and fsdp["world_size"] == 2 and single["world_size"] == 1
    rank0, rank1 = fsdp["seen"]
    for step, full in enumerate(single["seen"][0]):
        assert rank0[step] + rank1[step] == full, f"step {step}: ranks saw {rank0[step]} + {rank1[step]}, single {full}"
    assert set(fsdp["logits"]) == set(single["logits"])
    for kind in single["logits"]:
        assert torch.equal(fsdp["masks"][kind], single["masks"][kind]), kind
        torch.testing.assert_close(fsdp["logits"][kind], single["logits"][kind], atol=atol, rtol=0)
    # The logged KL is the global batch's (averaged over ranks, weighted by examples / real tokens), every step.
    assert len(fsdp["kl"]) == len(single["kl"]) == 6
    assert fsdp["kl"] == pytest.approx(single["kl"], abs=1e-5)
    assert fsdp["lambda_1"] == pytest.approx(single["lambda_1"], abs=1e-4)
    assert fsdp["lambda_2"] == pytest.approx(single["lambda_2"], abs=1e-4)


def test_fsdp_unit_masks_match_one_process(runs):
    """Heads and MLP blocks of a BERT classifier: sharded layers, whole mask logits, same-model teacher."""
    fsdp = runs["fsdp-seq-unit"]
    assert_same_fsdp_run(fsdp, runs["single-fsdp-seq-unit"])
    layout = fsdp["layout"]
    assert layout["units"] == ["<root>", "model.bert.embeddings.word_embeddings", "model.bert.encoder.layer.0",
                               "model.bert.encoder.layer.1"]
    assert layout["whole"] == ["mask_state.logits.heads", "mask_state.logits.mlps"]
    assert layout["trainable_sharded"] == [] and len(layout["sharded"]) > 20


def test_fsdp_weight_masks_on_a_causal_lm_match_one_process(runs):
    """Weight masks through `parametrize` on sharded GPT-2 Conv1D weights (no worked example of this existed), with
    per-token KL over padded sequences whose real-token counts differ between the ranks."""
    fsdp = runs["fsdp-causal-weight"]
    assert_same_fsdp_run(fsdp, runs["single-fsdp-causal-weight"])
    assert any(name.endswith("parametrizations.weight.original") for name in fsdp["layout"]["sharded"])
    assert len(fsdp["layout"]["whole"]) == 4 and fsdp["layout"]["trainable_sharded"] == []


def test_fsdp_checkpoint_resumes_to_the_uninterrupted_run(runs, tmp_path):
    """A sharded checkpoint holds the masks, multipliers, noise state and optimizer (never model weights); two fresh
    processes resumed from step 3 end exactly where the uninterrupted run ended at step 6."""
    uninterrupted = runs["fsdp-seq-unit"]
    checkpoint = uninterrupted["folder"] / "checkpoint-3"
    files = {path.name for path in checkpoint.iterdir()}
    assert {"masks.safetensors", "pruning_state.pt", "optimizer.pt", "scheduler.pt"} <= files
    assert not files & set(WEIGHT_FILES), files
    resumed = launch(SCRIPT, tmp_path, 4, 2,
                     {"resumed": f"fsdp --task seq --fsdp --resume {shlex.quote(str(checkpoint))}"})["resumed"]
    for kind, logits in uninterrupted["logits"].items():
        assert torch.equal(resumed["logits"][kind], logits), kind
    assert resumed["lambda_1"] == uninterrupted["lambda_1"] and resumed["lambda_2"] == uninterrupted["lambda_2"]
    assert resumed["kl"] == uninterrupted["kl"]   # steps 1-3 from the checkpoint's log, 4-6 recomputed


def test_the_fsdp_example_launches_with_torchrun(tmp_path):
    """examples/prune_fsdp.py --tiny under torchrun with 2 processes: on CPUs accelerate falls back to DDP, the
    trainer says so (naming the line of accelerate that decides it), and rank 0 writes the artifact."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--nnodes=1",
               "--master_addr=127.0.0.1", f"--master_port={_free_port()}", str(REPO / "examples" / "prune_fsdp.py"),
               "--tiny", "--output", str(tmp_path / "masks")]
    completed = subprocess.run(command, check=False, cwd=REPO, env=_environment(), capture_output=True, text=True,
                               timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "replicated on every process, not sharded" in completed.stderr
    assert "MULTI_CPU is not in that list" in completed.stderr
    assert {"masks.safetensors", "pruning_config.json"} <= {p.name for p in (tmp_path / "masks").iterdir()}
    assert "sparsity 0.500" in completed.stdout
