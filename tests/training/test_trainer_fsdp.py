"""FSDP2 on the CPU: `PruningTrainer` under torchrun with 2 processes (gloo, per-device batch 4), sharded through the
Trainer's own FSDP integration (accelerate's `fsdp2_prepare_model`, torch's `fully_shard`), must learn the masks
and log the KL of one process without FSDP on the same global batch (8), data and seed; and a run resumed from a
sharded checkpoint must end where the uninterrupted run ends.

accelerate 1.15 keeps the FSDP plugin only on accelerators and runs DDP on a multi-process CPU run instead
(`training.sharding.ACCELERATE_CPU_FALLBACK`); the helper script (fsdp_prune_script.py) flips that one decision back,
so nothing but the device differs from a GPU run. Same launcher as test_trainer_ddp.py: the two single-process
references share one launch, the two FSDP cases one torchrun launch (fresh model, Trainer and seed each); the resumed
run is a launch of its own (fresh processes are what it tests), and so is the example. A launch takes ~15-40 s on 2
busy cores, so the module is marked slow (it is not skipped). The same checks on GPUs: tests/gpu/test_fsdp_gpu.py.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from test_trainer_ddp import REPO, _environment, _free_port, launch  # noqa: E402  (the DDP tests' launcher)

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).with_name("fsdp_prune_script.py")
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin", "pytorch_model_fsdp.bin", "pytorch_model_fsdp_0")


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, dict]:
    """Each case computed once for the module, in two launches."""
    folder = tmp_path_factory.mktemp("fsdp")
    single = launch(SCRIPT, folder / "single", 8, 1, {"seq-unit": "--task seq",
                                                       "causal-weight": "--task causal --granularity weight"})
    fsdp = launch(SCRIPT, folder / "fsdp", 4, 2, {"seq-unit": "--task seq --fsdp --save-steps 3",
                                                  "causal-weight": "--task causal --granularity weight --fsdp"})
    return {**{f"single-{name}": result for name, result in single.items()},
            **{f"fsdp-{name}": result for name, result in fsdp.items()}}


def assert_same_run(fsdp: dict, single: dict, atol: float = 1e-4) -> None:
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
    assert_same_run(fsdp, runs["single-seq-unit"])
    layout = fsdp["layout"]
    assert layout["units"] == ["<root>", "model.bert.embeddings.word_embeddings", "model.bert.encoder.layer.0",
                               "model.bert.encoder.layer.1"]
    assert layout["whole"] == ["mask_state.logits.heads", "mask_state.logits.mlps"]
    assert layout["trainable_sharded"] == [] and len(layout["sharded"]) > 20


def test_fsdp_weight_masks_on_a_causal_lm_match_one_process(runs):
    """Weight masks through `parametrize` on sharded GPT-2 Conv1D weights (no worked example of this existed), with
    per-token KL over padded sequences whose real-token counts differ between the ranks."""
    fsdp = runs["fsdp-causal-weight"]
    assert_same_run(fsdp, runs["single-causal-weight"])
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
    resumed = launch(SCRIPT, tmp_path, 4, 2, {"resumed": f"--task seq --fsdp --resume {shlex.quote(str(checkpoint))}"})["resumed"]
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
    completed = subprocess.run(command, cwd=REPO, env=_environment(), capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "replicated on every process, not sharded" in completed.stderr
    assert "MULTI_CPU is not in that list" in completed.stderr
    assert {"masks.safetensors", "pruning_config.json"} <= {p.name for p in (tmp_path / "masks").iterdir()}
    assert "sparsity 0.500" in completed.stdout
