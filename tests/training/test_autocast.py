"""Masks under mixed precision, checked with the CPU's autocast (bf16 and fp16), as a GPU run would use them.

Under autocast the hooked activations are low precision while the mask logits stay fp32: the masks are cast to the
activation's dtype at the hook, so all-ones masks still pass every activation through bit for bit, a zero-ablated
head still equals its independent reference (the head's input columns of the output projection zeroed), weight masks
equal the weights multiplied out, and a pruning run with `bf16=True` trains fp32 logits. GPU versions of these checks:
tests/gpu/.
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import attention_output, make_batch, tiny_model

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.training.arguments import PruningArguments
from hf_heuristic_core.training.trainer import PruningTrainer

DTYPES = [torch.bfloat16, torch.float16]

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def forward(model, batch, dtype):
    with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
        return model(**batch).logits


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model_type", ["bert", "llama"])
def test_all_ones_masks_reproduce_the_unwrapped_model_under_autocast(model_type, dtype):
    batch = make_batch(model_type)
    reference = forward(tiny_model(model_type), batch, dtype)
    prunable = PrunableModel(tiny_model(model_type), PruningConfig(ablation="zero")).eval()
    prunable.set_masks(heads=torch.ones(prunable.num_layers, prunable.num_heads), mlps=torch.ones(prunable.num_layers))
    got = forward(prunable, batch, dtype)
    assert got.dtype == reference.dtype
    assert torch.equal(got, reference)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("model_type", ["bert", "llama"])
def test_zero_ablated_head_equals_zeroed_output_columns_under_autocast(model_type, dtype):
    """Independent reference: the head's slice of the attention output projection's input columns zeroed."""
    layer, head, head_dim = 1, 2, 8
    batch = make_batch(model_type)
    reference_model = tiny_model(model_type)
    with torch.no_grad():
        attention_output(reference_model, model_type, layer).weight[:, head * head_dim:(head + 1) * head_dim] = 0
    reference = forward(reference_model, batch, dtype)
    prunable = PrunableModel(tiny_model(model_type), PruningConfig(ablation="zero")).eval()
    heads = torch.ones(prunable.num_layers, prunable.num_heads)
    heads[layer, head] = 0
    prunable.set_masks(heads=heads)
    got = forward(prunable, batch, dtype)
    full = forward(tiny_model(model_type), batch, dtype)
    assert (got.float() - full.float()).abs().max() > 1e-2   # the head mattered
    torch.testing.assert_close(got.float(), reference.float(), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_weight_masks_equal_the_multiplied_out_weights_under_autocast(dtype):
    batch = make_batch("bert")
    prunable = PrunableModel(tiny_model("bert"), PruningConfig(granularity="weight",
                                                                target_modules=["attention.output.dense"]))
    generator = torch.Generator().manual_seed(0)
    masks = {kind: (torch.rand(shape, generator=generator) > 0.5).float()
             for kind, shape in prunable.mask_shapes().items()}
    prunable.set_masks(masks)
    got = forward(prunable.eval(), batch, dtype)
    reference_model = tiny_model("bert")
    with torch.no_grad():
        for name, parameter in reference_model.named_parameters():
            if name in masks:
                parameter.mul_(masks[name])
    torch.testing.assert_close(got.float(), forward(reference_model, batch, dtype).float(), rtol=0, atol=0)


@pytest.mark.parametrize("granularity", ["unit", "weight"])
def test_pruning_with_bf16_autocast_trains_fp32_logits(tmp_path, granularity):
    """`PruningArguments(bf16=True)` on the CPU runs the Trainer's autocast: the masks learn (fp32 logits, finite
    KL), and end close to the fp32 run of the same seed."""
    from datasets import Dataset
    generator = torch.Generator().manual_seed(0)
    rows = {"input_ids": torch.randint(3, 99, (32, 10), generator=generator).tolist(),
            "attention_mask": torch.ones(32, 10, dtype=torch.long).tolist()}
    config = (PruningConfig(ablation="zero", init_mean=1.0, init_std=0.5) if granularity == "unit" else
              PruningConfig(granularity="weight", init_mean=1.0, init_std=0.5, target_modules=["output.dense"]))
    results = {}
    for bf16 in (False, True):
        prunable = PrunableModel(tiny_model("bert"), config)
        args = PruningArguments(output_dir=str(tmp_path / str(bf16)), per_device_train_batch_size=8, max_steps=4,
                                use_cpu=True, bf16=bf16, seed=0, report_to="none", disable_tqdm=True, warmup_steps=1,
                                logging_steps=1, save_strategy="no", sparsity_warmup_steps=3, target_sparsity=0.5,
                                convergence_check=False)
        trainer = PruningTrainer(model=prunable, args=args, train_dataset=Dataset.from_dict(rows))
        trainer.train()
        kl = [entry["kl"] for entry in trainer.state.log_history if "kl" in entry]
        logits = {kind: logit.detach().clone() for kind, logit in prunable.mask_logits.items()}
        assert all(logit.dtype == torch.float32 for logit in logits.values())
        assert len(kl) == 4 and all(0 <= value < 10 for value in kl)
        results[bf16] = (kl, logits)
    (kl32, logits32), (kl16, logits16) = results[False], results[True]
    assert kl16 != kl32   # autocast did run
    assert kl16 == pytest.approx(kl32, rel=0.1, abs=0.01)
    difference = torch.cat([(logits16[kind] - logits32[kind]).abs().flatten() for kind in logits32])
    # Adam moves each logit by about its learning rate whatever the gradient's size, so an entry whose gradient is
    # near zero can step either way under bf16 rounding (a few of 1536 weight-mask entries do): judge the bulk.
    assert float((difference < 0.05).float().mean()) >= 0.99 and float(difference.median()) < 0.01
