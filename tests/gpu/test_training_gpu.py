"""A pruning run on a GPU: fp32 and bf16 autocast, unit and weight masks; the logits stay fp32 on the GPU, the noise
generator is a CUDA one, a run is reproducible from its seed, and the artifact loads on the CPU."""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from tiny_models import tiny_model

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.training.arguments import PruningArguments
from hf_heuristic_core.training.trainer import PruningTrainer


def data() -> Dataset:
    generator = torch.Generator().manual_seed(0)
    return Dataset.from_dict({"input_ids": torch.randint(3, 99, (64, 16), generator=generator).tolist(),
                              "attention_mask": torch.ones(64, 16, dtype=torch.long).tolist()})


def run(folder, granularity: str, bf16: bool, **options):
    config = (PruningConfig(ablation="zero", init_mean=1.0, init_std=0.5) if granularity == "unit" else
              PruningConfig(granularity="weight", init_mean=1.0, init_std=0.5, target_modules=["output.dense"]))
    prunable = PrunableModel(tiny_model("bert"), config)
    args = PruningArguments(output_dir=str(folder), per_device_train_batch_size=16, max_steps=6, bf16=bf16, seed=0,
                            report_to="none", disable_tqdm=True, warmup_steps=1, logging_steps=1,
                            save_strategy="no", sparsity_warmup_steps=4, target_sparsity=0.5,
                            convergence_check=False, **options)
    trainer = PruningTrainer(model=prunable, args=args, train_dataset=data())
    trainer.train()
    return trainer, prunable


@pytest.mark.parametrize("granularity", ["unit", "weight"])
@pytest.mark.parametrize("bf16", [False, True])
def test_pruning_step_on_the_gpu(tmp_path, granularity, bf16):
    trainer, prunable = run(tmp_path / "a", granularity, bf16)
    assert prunable.generator.device.type == "cuda"
    kl = [entry["kl"] for entry in trainer.state.log_history if "kl" in entry]
    assert len(kl) == 6 and all(0 <= value < 10 for value in kl)
    for _, logit in prunable.mask_logits.items():
        assert logit.device.type == "cuda" and logit.dtype == torch.float32
    _, again = run(tmp_path / "b", granularity, bf16)
    for kind, logit in prunable.mask_logits.items():
        torch.testing.assert_close(again.mask_logits[kind], logit, rtol=0, atol=1e-6)
    prunable.save_pretrained(tmp_path / "artifact")
    reloaded = PrunableModel(tiny_model("bert"), prunable.pruning_config.settings_only())
    reloaded.load_masks(tmp_path / "artifact")
    for kind, mask in prunable.get_masks().items():
        assert torch.equal(reloaded.get_masks()[kind], mask)


def test_memory_options_on_the_gpu_learn_what_the_plain_step_learns(tmp_path):
    _, plain = run(tmp_path / "plain", "unit", False)
    _, tricks = run(tmp_path / "tricks", "unit", False, activation_checkpointing=True, kl_chunk_size=5)
    for kind, logit in plain.mask_logits.items():
        torch.testing.assert_close(tricks.mask_logits[kind], logit, rtol=0, atol=1e-5)
