"""A layer that keeps no attention head: which stock classes run zero heads (torch 2.13 / transformers 5.24), and the
placeholder head that remains only where they cannot.

Measured: BERT / RoBERTa attention runs with zero-width q/k/v/o (eager and SDPA), so there a head-less layer keeps no
slot (exactness here and in test_export_exact.py, whose layer 0 keeps no head). Llama / Mistral / Qwen2 / Qwen3
attention runs with zero heads too, but the KV cache reads a zero-head layer's length as 0, and cached generation
then produced other tokens than the hooked model: they keep one zero placeholder head, as GPT-2 does (its fused
c_attn is split by `split_size`, which cannot be 0). No stock config can state 0 heads, so a layout in which *no*
layer keeps a head keeps the placeholder in every layer (it then loads with plain from_pretrained)."""

from __future__ import annotations

import pytest
import torch
import transformers
from tiny_models import make_batch, one_torch_thread, tiny_config, tiny_model  # noqa: F401

from hf_heuristic_core import PrunableModel, PruningConfig, load_slim, save_slim

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CAUSAL = ("gpt2", "llama", "mistral", "qwen2", "qwen3")
TYPES = ("bert", "roberta", "gpt2", "llama", "mistral", "qwen2", "qwen3")


@pytest.mark.parametrize("model_type", TYPES)
def test_no_stock_config_can_state_zero_heads(model_type):
    """Turns red when transformers builds a model with 0 heads per layer: then the all-head-less stock layout can
    drop its placeholder too (export.plan.plan_layers)."""
    overrides = {"n_head" if model_type == "gpt2" else "num_attention_heads": 0}
    if model_type not in ("bert", "roberta", "gpt2"):
        overrides.update(num_key_value_heads=0, head_dim=8)
    auto = transformers.AutoModelForCausalLM if model_type in CAUSAL else transformers.AutoModel
    with pytest.raises(ZeroDivisionError):   # in the config's validation (Llama family) or the attention's init
        auto.from_config(tiny_config(model_type, num_layers=2, **overrides))


def _headless_first_layer(model_type: str, ablation: str, attn: str = "eager"):
    task = "causal_lm" if model_type in CAUSAL else "seq_cls"
    prunable = PrunableModel(tiny_model(model_type, task=task, num_layers=2, attn_implementation=attn),
                             PruningConfig(ablation=ablation))
    batch = make_batch(model_type, batch_size=3, seq_len=8, padding="left" if task == "causal_lm" else "right")
    if ablation == "mean":
        prunable.compute_means([make_batch(model_type, batch_size=4, seq_len=8, seed=5)], show_progress=False)
    prunable.set_masks(heads=torch.tensor([[0., 0, 0, 0], [1., 1, 0, 0]]))
    return prunable.eval(), batch


def _diff(a: torch.Tensor, b: torch.Tensor, mask: torch.Tensor) -> float:
    d = (a - b).abs()
    return float((d[mask.bool()] if d.dim() == 3 else d).max())


def test_the_kv_cache_still_reads_a_zero_head_layer_as_empty():
    """Why decoders keep the placeholder. Turns red when transformers' cache measures zero-head keys by their
    sequence axis: then `zero_width_attention` can be set for the Llama-like SlimMap (and the tests below extended)."""
    from transformers.cache_utils import DynamicLayer
    layer = DynamicLayer()
    layer.update(torch.zeros(1, 0, 5, 8), torch.zeros(1, 0, 5, 8))
    assert layer.get_seq_length() == 0


@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
def test_decoders_keep_a_placeholder_head_and_generate_like_the_hooked_model(model_type):
    prunable, batch = _headless_first_layer(model_type, "mean")
    slim = prunable.export_slim()
    assert slim.config.hf_heuristic_core_slim["layers"][0]["query_slots"] == [-1]
    kwargs = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 0}
    assert torch.equal(prunable.generate(**batch, **kwargs), slim.generate(**batch, **kwargs))


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("model_type", ["bert", "roberta"])
def test_a_head_less_layer_has_zero_width_attention_and_is_exact(model_type, attn, tmp_path):
    prunable, batch = _headless_first_layer(model_type, "mean", attn)
    with torch.no_grad():
        hooked = prunable(**batch).logits
    slim = prunable.export_slim()
    info = slim.config.hf_heuristic_core_slim
    assert info["layers"][0]["query_slots"] == [] and info["layers"][0]["kv_slots"] == []
    assert slim.base_model.encoder.layer[0].attention.self.query.out_features == 0
    with torch.no_grad():
        assert _diff(hooked, slim(**batch).logits, batch["attention_mask"]) <= 1e-5
    save_slim(slim, tmp_path / "slim")
    with torch.no_grad():
        assert _diff(hooked, load_slim(tmp_path / "slim")(**batch).logits, batch["attention_mask"]) <= 1e-5


def test_gpt2_keeps_its_placeholder_head():
    prunable, batch = _headless_first_layer("gpt2", "zero")
    slim = prunable.export_slim()
    assert slim.config.hf_heuristic_core_slim["layers"][0]["query_slots"] == [-1]
    with torch.no_grad():
        assert _diff(prunable(**batch).logits, slim(**batch).logits, batch["attention_mask"]) <= 1e-5


@pytest.mark.parametrize("ablation", ["zero", "mean"])
def test_no_layer_with_a_head_keeps_placeholders_so_the_stock_config_holds(ablation, tmp_path):
    """Every head pruned: one zero placeholder head per layer (a stock config cannot say 0), stock reload exact."""
    prunable, batch = _headless_first_layer("llama", ablation)
    prunable.set_masks(heads=torch.zeros(2, 4))
    with torch.no_grad():
        hooked = prunable(**batch).logits
    slim = prunable.export_slim(uniform=True)
    assert (slim.config.num_attention_heads, slim.config.num_key_value_heads) == (1, 1)
    save_slim(slim, tmp_path / "slim")
    plain = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "slim").eval()
    with torch.no_grad():
        assert _diff(hooked, plain(**batch).logits, batch["attention_mask"]) <= 1e-5
