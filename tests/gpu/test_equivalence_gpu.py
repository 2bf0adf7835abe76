"""Masks on a GPU against independent references: all-ones masks reproduce the unwrapped model bit for bit (fp32 and
bf16), a zero-ablated head equals its output-projection columns zeroed, GPU and CPU agree, the mask noise is drawn on
the GPU, and the hooks add no host synchronization to a training forward and backward."""

from __future__ import annotations

import warnings

import pytest
import torch
from tiny_models import attention_output, make_batch, tiny_model

from hf_heuristic_core import PrunableModel, PruningConfig


def on(batch: dict, device) -> dict:
    return {key: value.to(device) for key, value in batch.items()}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("model_type", ["bert", "llama"])
def test_all_ones_masks_reproduce_the_unwrapped_model(cuda, model_type, dtype):
    batch = on(make_batch(model_type), cuda)
    reference = tiny_model(model_type, dtype=dtype).to(cuda)
    prunable = PrunableModel(tiny_model(model_type, dtype=dtype).to(cuda), PruningConfig(ablation="zero")).eval()
    prunable.set_masks(heads=torch.ones(prunable.num_layers, prunable.num_heads), mlps=torch.ones(prunable.num_layers))
    with torch.no_grad():
        assert torch.equal(prunable(**batch).logits, reference(**batch).logits)


@pytest.mark.parametrize("model_type", ["bert", "llama"])
def test_zero_ablated_head_equals_zeroed_output_columns(cuda, model_type):
    layer, head, head_dim = 1, 2, 8
    batch = on(make_batch(model_type), cuda)
    reference = tiny_model(model_type)
    with torch.no_grad():
        attention_output(reference, model_type, layer).weight[:, head * head_dim:(head + 1) * head_dim] = 0
    prunable = PrunableModel(tiny_model(model_type).to(cuda), PruningConfig(ablation="zero")).eval()
    heads = torch.ones(prunable.num_layers, prunable.num_heads)
    heads[layer, head] = 0
    prunable.set_masks(heads=heads)
    with torch.no_grad():
        got = prunable(**batch).logits
        expected = reference.to(cuda)(**batch).logits
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-5)


def test_gpu_and_cpu_agree_with_mean_ablation(cuda):
    batch = make_batch("bert")
    heads = torch.ones(2, 4)
    heads[0, 1] = heads[1, 3] = 0
    outputs = []
    for device in ("cpu", cuda):
        prunable = PrunableModel(tiny_model("bert").to(device), PruningConfig(ablation="mean"))
        prunable.compute_means(on(batch, device), show_progress=False)
        prunable.eval().set_masks(heads=heads, mlps=torch.tensor([1.0, 0.0]))
        with torch.no_grad():
            outputs.append(prunable(**on(batch, device)).logits.cpu())
    torch.testing.assert_close(outputs[1], outputs[0], rtol=0, atol=1e-4)


def test_training_forward_draws_noise_on_the_gpu_without_host_syncs(cuda):
    """Sampled masks come from a CUDA generator; counting CUDA sync warnings, a masked training forward + backward
    synchronizes no more often than the same model's plain forward + backward."""
    batch = on(make_batch("bert", batch_size=4, seq_len=16), cuda)
    plain = tiny_model("bert").to(cuda)
    prunable = PrunableModel(tiny_model("bert").to(cuda), PruningConfig(ablation="zero", init_mean=1.0))
    prunable.train_dropout = False
    prunable.train()
    prunable.generator = torch.Generator(device=cuda).manual_seed(0)

    def syncs(step) -> int:
        step()   # warm-up (allocator, kernels)
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                step()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        # count the syncs, not the mode's own first-use notice ("... does not yet detect all synchronizing ...")
        return sum(str(w.message).startswith("called a synchronizing CUDA operation") for w in caught)

    embeddings = plain.get_input_embeddings()

    def plain_step():
        inputs = embeddings(batch["input_ids"]).detach().requires_grad_(True)
        plain(inputs_embeds=inputs, attention_mask=batch["attention_mask"]).logits.sum().backward()

    def masked_step():
        prunable.zero_grad(set_to_none=True)
        prunable(**batch).logits.sum().backward()

    assert syncs(masked_step) <= syncs(plain_step)
    assert prunable._last_masks["heads"].device.type == "cuda"
    assert all(logit.grad is not None and logit.grad.device.type == "cuda"
               for _, logit in prunable.mask_logits.items())


def test_eval_masks_are_cached_on_the_gpu(cuda):
    """Learned masks in eval mode are binarized once and kept on the logits' device, not copied per forward."""
    prunable = PrunableModel(tiny_model("bert").to(cuda), PruningConfig(ablation="zero", init_mean=1.0)).eval()
    with torch.no_grad():
        prunable(**on(make_batch("bert"), cuda))
    assert all(mask.device.type == "cuda" for mask in prunable._last_masks.values() if mask is not None)


def test_wrapping_a_gpu_model_puts_the_mask_state_on_the_gpu(cuda):
    """The mask logits follow the model they wrap (they stayed on the CPU, so a CUDA generator failed to draw and
    every draw was copied to the GPU; found on the first GPU run)."""
    prunable = PrunableModel(tiny_model("bert").to(cuda), PruningConfig(ablation="zero", init_mean=1.0)).train()
    assert prunable.mask_logits_device.type == "cuda"
    assert prunable.mask_state.device.type == "cuda"
    prunable.generator = torch.Generator(device=prunable.mask_logits_device).manual_seed(0)
    prunable(**on(make_batch("bert"), cuda)).logits.sum().backward()
    assert all(logit.grad is not None and logit.grad.device.type == "cuda"
               for _, logit in prunable.mask_logits.items())
