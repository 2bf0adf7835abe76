"""Slim export is exact: the slim model's logits equal the hooked subnetwork's, in memory and after a reload, and its
parameter count equals the count worked out by hand from the masks."""

from __future__ import annotations

import pytest
import torch
import transformers
from tiny_models import make_batch, one_torch_thread, tiny_model  # noqa: F401

from hf_heuristic_core import PrunableModel, PruningConfig, load_slim, save_slim

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CAUSAL = ("gpt2", "llama", "mistral", "qwen2", "qwen3")
TYPES = ("bert", "roberta", "xlm-roberta", "electra", "distilbert", *CAUSAL)
GQA = ("llama", "mistral", "qwen2", "qwen3")   # 4 query heads sharing 2 key/value heads in the tiny configs
# layer 0: no head left; layer 1: one query head of kv group 0, all of group 1; layer 2: single query heads of both
# groups; layer 3: kv group 1 removed entirely. MLP blocks 1 and 3 removed.
HEADS = torch.tensor([[0, 0, 0, 0], [1, 0, 1, 1], [0, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.float)
MLPS = torch.tensor([1, 0, 1, 0], dtype=torch.float)
# Slots worked out by hand: a head-less layer keeps one zero placeholder head; GQA layer 1 pads group 0 with one
# zero-output query head (2 kv heads x 2 query heads: 8 projection rows, the same as duplicating a kv head, and a
# smaller cache); layer 2 keeps one query head per group.
QUERY_SLOTS = {"mha": [1, 3, 2, 2], "gqa": [1, 4, 2, 2]}
KV_SLOTS = {"mha": [1, 3, 2, 2], "gqa": [1, 2, 2, 1]}
# BERT-like attention runs with zero heads, so the head-less layer 0 needs no placeholder head (the others keep one).
PLACEHOLDER = ("gpt2", "distilbert", *GQA)


def _slots(model_type: str) -> tuple[list[int], list[int]]:
    table = "gqa" if model_type in GQA else "mha"
    first = 1 if model_type in PLACEHOLDER else 0
    return [first] + QUERY_SLOTS[table][1:], [first] + KV_SLOTS[table][1:]


def _wrapped(model_type: str, ablation: str, attn: str = "eager", seed: int = 0):
    task = "causal_lm" if model_type in CAUSAL else "seq_cls"
    model = tiny_model(model_type, task=task, num_layers=4, attn_implementation=attn, seed=seed)
    prunable = PrunableModel(model, PruningConfig(ablation=ablation))
    batch = make_batch(model_type, batch_size=4, seq_len=9, padding="left" if task == "causal_lm" else "right",
                       seed=seed)
    if ablation == "mean":
        prunable.compute_means([make_batch(model_type, batch_size=5, seq_len=9, seed=seed + 7)], show_progress=False)
    prunable.set_masks(heads=HEADS, mlps=MLPS)
    return prunable.eval(), batch


def _max_diff(reference: torch.Tensor, other: torch.Tensor, attention_mask: torch.Tensor) -> float:
    diff = (reference - other).abs()
    if diff.dim() == 3:
        diff = diff[attention_mask.bool()]
    return float(diff.max())


def _logits(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch).logits


def _expected_parameters(model: torch.nn.Module, model_type: str, ablation: str) -> int:
    """Original count minus the removed rows and columns plus added biases, from the masks and the config."""
    config = model.config
    hidden = config.hidden_size
    heads = config.num_attention_heads
    kv_heads = getattr(config, "num_key_value_heads", heads)
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    inter = {"gpt2": 48, "distilbert": 48}.get(model_type, getattr(config, "intermediate_size", 48))
    gqa = model_type in GQA
    q_bias = model_type not in ("llama", "mistral", "qwen3")          # q/k/v biases
    o_bias = model_type not in GQA                                   # output projection bias
    mlp_bias = model_type not in GQA
    mlp_inputs = 2 if gqa else 1                                     # gate and up
    total = sum(p.numel() for p in model.parameters())
    query_slots, kv_slot_counts = _slots(model_type)
    for layer in range(4):
        q_slots, kv_slots = query_slots[layer], kv_slot_counts[layer]
        total -= (heads - q_slots) * head_dim * (hidden + q_bias)           # query rows
        total -= 2 * (kv_heads - kv_slots) * head_dim * (hidden + q_bias)   # key and value rows
        total -= (heads - q_slots) * head_dim * hidden                      # output projection columns
        if ablation == "mean" and not o_bias and HEADS[layer].sum() < heads:
            total += hidden                                                 # a bias to fold the means into
        if MLPS[layer] == 0:
            placeholder = 1 if model_type == "gpt2" else 0                  # Conv1D cannot be zero-width
            total -= mlp_inputs * (inter - placeholder) * (hidden + mlp_bias)
            total -= (inter - placeholder) * hidden
            if ablation == "mean" and not mlp_bias:
                total += hidden
    return total


@pytest.mark.parametrize("ablation", ["mean", "zero"])
@pytest.mark.parametrize("model_type", TYPES)
def test_slim_logits_equal_hooked_and_survive_reload(model_type, ablation, tmp_path):
    prunable, batch = _wrapped(model_type, ablation)
    before = {k: v.clone() for k, v in prunable.model.state_dict().items()}
    hooked = _logits(prunable, batch)
    with prunable.masks_disabled():   # the masks matter: otherwise equality would prove nothing
        assert _max_diff(hooked, _logits(prunable, batch), batch["attention_mask"]) > 1e-3
    slim = prunable.export_slim()
    assert not slim._forward_hooks and not any(m._forward_pre_hooks for m in slim.modules())
    assert type(slim) is type(prunable.model)
    assert _max_diff(hooked, _logits(slim, batch), batch["attention_mask"]) <= 1e-4
    # the hooked model is untouched: same weights, same outputs
    assert all(torch.equal(before[k], v) for k, v in prunable.model.state_dict().items())
    assert torch.equal(_logits(prunable, batch), hooked)
    assert sum(p.numel() for p in slim.parameters()) == _expected_parameters(prunable.model, model_type, ablation)
    info = slim.config.hf_heuristic_core_slim
    assert [len(layer["query_slots"]) for layer in info["layers"]] == _slots(model_type)[0]
    assert [len(layer["kv_slots"]) for layer in info["layers"]] == _slots(model_type)[1]

    save_slim(slim, tmp_path / "slim")
    reloaded = load_slim(tmp_path / "slim")
    assert _max_diff(hooked, _logits(reloaded, batch), batch["attention_mask"]) <= 1e-4
    assert sum(p.numel() for p in reloaded.parameters()) == sum(p.numel() for p in slim.parameters())
    assert "load_slim" in (tmp_path / "slim" / "README.md").read_text()


@pytest.mark.parametrize("model_type", ["llama", "gpt2", "bert"])
def test_sdpa_attention_is_exact_too(model_type):
    prunable, batch = _wrapped(model_type, "mean", attn="sdpa")
    hooked = _logits(prunable, batch)
    assert _max_diff(hooked, _logits(prunable.export_slim(), batch), batch["attention_mask"]) <= 1e-4


@pytest.mark.parametrize("model_type", ["llama", "gpt2"])
def test_generate_with_cache_matches_hooked(model_type):
    prunable, batch = _wrapped(model_type, "mean")
    slim = prunable.export_slim()
    kwargs = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0}
    assert torch.equal(prunable.generate(**batch, **kwargs), slim.generate(**batch, **kwargs))


@pytest.mark.parametrize("ablation", ["mean", "zero"])
def test_uniform_llama_layout_loads_with_plain_automodel(ablation, tmp_path):
    """Every layer keeps one whole kv group (2 query heads) and its MLP: a stock Llama config with explicit head_dim
    (and attention_bias for the folded means) states it, so plain transformers loads the folder."""
    model = tiny_model("llama", task="causal_lm", num_layers=2)
    prunable = PrunableModel(model, PruningConfig(ablation=ablation))
    batch = make_batch("llama", batch_size=3, seq_len=8, padding="left")
    if ablation == "mean":
        prunable.compute_means([batch], show_progress=False)
    prunable.set_masks(heads=torch.tensor([[1., 1, 0, 0], [0, 0, 1, 1]]))
    prunable.eval()
    hooked = _logits(prunable, batch)
    slim = prunable.export_slim()
    config = slim.config
    assert config.hf_heuristic_core_slim["stock"] is True
    assert (config.num_attention_heads, config.num_key_value_heads, config.head_dim) == (2, 1, 8)
    assert config.attention_bias is (ablation == "mean")
    save_slim(slim, tmp_path / "slim")
    plain = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "slim").eval()
    assert _max_diff(hooked, _logits(plain, batch), batch["attention_mask"]) <= 1e-4
    # 2 of 4 query heads and 1 of 2 kv heads: q, o lose 2 x 8 x 32 each; k, v lose 1 x 8 x 32 each; with the means,
    # attention_bias brings q (16), k (8), v (8) and o (32) biases
    expected = sum(p.numel() for p in model.parameters()) - 2 * (2 * 256 + 2 * 256 + 256 + 256) \
        + (2 * (16 + 8 + 8 + 32) if ablation == "mean" else 0)
    assert sum(p.numel() for p in plain.parameters()) == expected
    assert "plain transformers" in (tmp_path / "slim" / "README.md").read_text()


def test_non_uniform_llama_folder_loads_with_its_own_code(tmp_path):
    """An uneven Llama folder carries its modeling code (export/remote_code.py); every slim type and a process that
    cannot import the package: test_export_remote_code.py."""
    prunable, batch = _wrapped("llama", "zero")
    save_slim(prunable.export_slim(), tmp_path / "slim")
    auto = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "slim", trust_remote_code=True)
    assert torch.equal(_logits(auto, batch), _logits(load_slim(tmp_path / "slim"), batch))


def test_masks_argument_and_fixed_masks_agree():
    prunable, batch = _wrapped("bert", "mean")
    via_argument = prunable.export_slim(masks={"heads": HEADS, "mlps": MLPS})
    assert torch.equal(_logits(via_argument, batch), _logits(prunable.export_slim(), batch))


STACKS = {"bert": "encoder.layer", "llama": "layers", "distilbert": "transformer.layer"}


@pytest.mark.parametrize("model_type, path", [("bert", "output.dense"), ("llama", "mlp.down_proj"),
                                              ("distilbert", "ffn.lin2")])
def test_removed_mlp_block_returns_its_bias_without_arithmetic(model_type, path, tmp_path):
    """A layer whose MLP block is gone outputs the folded mean as a broadcast view of the bias (no scaled copy into
    a [tokens, hidden] buffer); exact in memory and after load_slim."""
    from hf_heuristic_core.export.fold import BiasOnlyLinear
    prunable, batch = _wrapped(model_type, "mean")
    slim = prunable.export_slim()
    stack = slim.base_model.get_submodule(STACKS[model_type])
    removed, kept = stack[1].get_submodule(path), stack[0].get_submodule(path)   # MLPS = [1, 0, 1, 0]
    assert type(removed) is BiasOnlyLinear and type(kept) is torch.nn.Linear
    out = removed(torch.randn(2, 5, 0))
    assert out.shape == (2, 5, 32) and out.stride() == (0, 0, 1) and torch.equal(out[1, 3], removed.bias)
    assert torch.allclose(removed.bias, prunable.get_means()["mlps"][1], atol=1e-6)   # the block's mean, folded
    hooked = _logits(prunable, batch)
    assert _max_diff(hooked, _logits(slim, batch), batch["attention_mask"]) <= 1e-4
    save_slim(slim, tmp_path / "slim")
    reloaded = load_slim(tmp_path / "slim")
    assert type(reloaded.base_model.get_submodule(STACKS[model_type])[1].get_submodule(path)) is BiasOnlyLinear
    assert _max_diff(hooked, _logits(reloaded, batch), batch["attention_mask"]) <= 1e-4
