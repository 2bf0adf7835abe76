"""Edge masks (#37) on a GPU: all edges kept reproduce the unwrapped model, a removed edge gives what it gives on the
CPU, and a pruning run keeps its edge logits in fp32 on the GPU and saves an artifact the CPU loads."""

from __future__ import annotations

import copy

import torch
from datasets import Dataset
from tiny_models import make_batch, tiny_model

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.training.arguments import PruningArguments
from hf_heuristic_core.training.trainer import PruningTrainer


def _edges(model) -> PrunableModel:
    return PrunableModel(model, PruningConfig(granularity="edge", ablation="zero")).eval()


def test_edge_masks_on_the_gpu_match_the_plain_model_and_the_cpu(cuda):
    model = tiny_model("llama", task="causal_lm")
    batch = {k: v for k, v in make_batch("llama").items() if k in ("input_ids", "attention_mask")}
    on_gpu = {k: v.to(cuda) for k, v in batch.items()}
    with torch.no_grad():
        plain = copy.deepcopy(model).to(cuda)(**on_gpu).logits
    cpu, gpu = _edges(copy.deepcopy(model)), _edges(copy.deepcopy(model).to(cuda))
    edges = torch.ones(gpu.mask_shapes()["edges"])
    with torch.no_grad(), gpu.masks_applied({"edges": edges}):
        torch.testing.assert_close(gpu(**on_gpu).logits, plain, rtol=0, atol=1e-5)
    names = gpu.granularity.graph.edge_names()
    edges[[i for i, name in enumerate(names) if name.startswith("a0.h1->")]] = 0   # one head's outgoing edges
    with torch.no_grad(), gpu.masks_applied({"edges": edges}), cpu.masks_applied({"edges": edges}):
        removed_gpu, removed_cpu = gpu(**on_gpu).logits, cpu(**batch).logits
    assert (removed_cpu - plain.cpu()).abs().max() > 1e-3      # the removed edges change the output
    torch.testing.assert_close(removed_gpu.cpu(), removed_cpu, rtol=0, atol=1e-4)


def test_edge_pruning_run_on_the_gpu(tmp_path, cuda):
    generator = torch.Generator().manual_seed(0)
    data = Dataset.from_dict({"input_ids": torch.randint(3, 99, (32, 12), generator=generator).tolist(),
                              "attention_mask": torch.ones(32, 12, dtype=torch.long).tolist()})
    prunable = PrunableModel(tiny_model("llama", task="causal_lm"),
                             PruningConfig(granularity="edge", ablation="zero", init_mean=1.0, init_std=0.5))
    args = PruningArguments(output_dir=str(tmp_path / "run"), per_device_train_batch_size=8, max_steps=4, seed=0,
                            report_to="none", disable_tqdm=True, warmup_steps=1, logging_steps=1, save_strategy="no",
                            sparsity_warmup_steps=2, target_sparsity=0.5, convergence_check=False)
    trainer = PruningTrainer(model=prunable, args=args, train_dataset=data)
    trainer.train()
    kl = [entry["kl"] for entry in trainer.state.log_history if "kl" in entry]
    assert len(kl) == 4 and all(0 <= value < 10 for value in kl)
    logits = prunable.mask_logits["edges"]
    assert logits.device.type == "cuda" and logits.dtype == torch.float32
    assert prunable.generator.device.type == "cuda"
    prunable.save_pretrained(tmp_path / "artifact")
    reloaded = PrunableModel(tiny_model("llama", task="causal_lm"), prunable.pruning_config.settings_only())
    reloaded.load_masks(tmp_path / "artifact")
    assert torch.equal(reloaded.get_masks()["edges"], prunable.get_masks()["edges"].cpu())
