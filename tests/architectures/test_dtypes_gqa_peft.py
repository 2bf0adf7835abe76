"""Masks on bf16 models (fp32 mask parameters), on grouped-query attention (heads sharing a kv head masked
independently) and on PEFT LoRA models (base and adapter both masked).

Every reference is computed by hand or by editing weights / own hooks, never through the package's mask
code. (Moved from tests/test_model.py.)
"""

from __future__ import annotations

import copy

import pytest
import torch

from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import (HEADS, HEAD_DIM, LAYERS, attention_output, constant_output, logits_of, make_batch,
                         mlp_output, set_logits, tiny_model, wrap, zero_head_inputs)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_bf16_model_with_fp32_mask_parameters():
    model = tiny_model("llama", dtype=torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16
    batch = make_batch("llama")
    pm = wrap(model)  # mean ablation
    pm.compute_means([batch], show_progress=False)
    assert pm.mask_logits.heads.dtype == torch.float32 and pm.mask_logits.mlps.dtype == torch.float32
    assert pm.get_means()["heads"].dtype == torch.float32 and pm.get_means()["mlps"].dtype == torch.float32
    set_logits(pm, torch.zeros(LAYERS, HEADS), torch.zeros(LAYERS))
    pm.train()
    out = pm(**batch, labels=torch.tensor([0, 1, 2]))
    assert out.logits.dtype == torch.bfloat16 and torch.isfinite(out.logits.float()).all()
    out.loss.backward()
    assert pm.mask_logits.heads.grad.dtype == torch.float32 and torch.isfinite(pm.mask_logits.heads.grad).all()
    assert pm.mask_logits.heads.grad.abs().sum() > 0
    pm.eval()
    assert logits_of(pm, batch).dtype == torch.bfloat16


def test_bf16_zero_ablation_equals_zeroed_columns():
    model = tiny_model("llama", dtype=torch.bfloat16)
    reference = copy.deepcopy(model)
    zero_head_inputs(attention_output(reference, "llama", 1), [3], HEAD_DIM["llama"])
    batch = make_batch("llama")
    pm = wrap(model, ablation="zero").eval()
    heads = torch.ones(LAYERS, HEADS)
    heads[1, 3] = 0
    pm.set_masks(heads=heads)
    torch.testing.assert_close(logits_of(pm, batch), logits_of(reference, batch))


@pytest.mark.parametrize("model_type", ["llama", "gemma"])
def test_gqa_heads_sharing_a_kv_head_are_masked_independently(model_type):
    model = tiny_model(model_type)
    assert model.config.num_key_value_heads < model.config.num_attention_heads
    batch = make_batch(model_type)
    for head in range(HEADS):
        reference = copy.deepcopy(model)
        zero_head_inputs(attention_output(reference, model_type, 0), [head], HEAD_DIM[model_type])
        pm = wrap(copy.deepcopy(model), ablation="zero").eval()
        heads = torch.ones(LAYERS, HEADS)
        heads[0, head] = 0
        pm.set_masks(heads=heads)
        torch.testing.assert_close(logits_of(pm, batch), logits_of(reference, batch), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("model_type, targets", [("bert", ["query", "value", "dense"]),
                                                 ("llama", ["q_proj", "o_proj", "down_proj"])])
def test_peft_lora_model_masks_base_and_adapter(model_type, targets):
    peft = pytest.importorskip("peft")
    base = tiny_model(model_type)
    torch.manual_seed(3)
    lora = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=targets,
                                                      init_lora_weights=False))
    batch = make_batch(model_type)
    merged = copy.deepcopy(lora).merge_and_unload()  # plain model with W + BA
    assert type(merged).__name__ != "PeftModel"
    with torch.no_grad():
        assert not torch.allclose(lora(**batch).logits, logits_of(tiny_model(model_type), batch), atol=1e-4)
    zero_head_inputs(attention_output(merged, model_type, 0), [1], HEAD_DIM[model_type])
    constant_output(mlp_output(merged, model_type, 1), torch.zeros(1))
    expected = logits_of(merged, batch)

    pm = wrap(lora, ablation="zero").eval()
    assert (pm.num_layers, pm.num_heads, pm.head_dim) == (LAYERS, HEADS, HEAD_DIM[model_type])
    heads = torch.ones(LAYERS, HEADS)
    heads[0, 1] = 0
    pm.set_masks(heads=heads, mlps=torch.tensor([1.0, 0.0]))
    torch.testing.assert_close(logits_of(pm, batch), expected, atol=1e-5, rtol=1e-4)
    with pm.masks_disabled():
        with torch.no_grad():
            torch.testing.assert_close(pm(**batch).logits, lora(**batch).logits)
