"""A layer that keeps no attention head: which stock classes run zero heads (torch 2.13 / transformers 5.24), and the
placeholder head that remains only where they cannot.

Measured: BERT / RoBERTa attention runs with zero-width q/k/v/o (eager and SDPA), so there a head-less layer keeps no
slot (exactness here and in test_export_exact.py, whose layer 0 keeps no head). Llama / Mistral / Qwen2 / Qwen3
attention runs with zero heads too, forward and cached generate, except in the layer whose KV cache transformers
reads the sequence length from by counting elements (layer 0 / the first full-attention layer): a zero-head layer
there reads as empty and cached generation produced other tokens, so that layer alone keeps one zero placeholder
head (`export.slim.cache_length_layers`). GPT-2 keeps it everywhere (its fused c_attn is split by `split_size`, which
cannot be 0). No stock config can state 0 heads, so a layout in which *no* layer keeps a head keeps the placeholder
in every layer (it then loads with plain from_pretrained); so does a layout the placeholders make uniform."""

from __future__ import annotations

from unittest import mock

import pytest
import torch
import transformers
from tiny_models import make_batch, one_torch_thread, tiny_config, tiny_model  # noqa: F401

from hf_heuristic_core import PrunableModel, PruningConfig, load_slim, save_slim
from hf_heuristic_core.export import slim as slim_module
from hf_heuristic_core.export.slim import cache_length_layers, parameter_count

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
    """Why the length layer keeps its placeholder. Turns red when transformers' cache measures zero-head keys by their
    sequence axis: then `cache_length_layer` can go from the Llama-like SlimMap (and every empty layer drop it)."""
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


GENERATE = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0, "output_scores": True,
            "return_dict_in_generate": True}


def _decoder(model_type: str, ablation: str, empty: list[int], layers: int = 3, config=None):
    """A tiny decoder whose `empty` layers keep no head and whose other layers lose head 0 (a padded GQA group)."""
    model = (tiny_model(model_type, task="causal_lm", num_layers=layers) if config is None else
             transformers.AutoModelForCausalLM.from_config(config, attn_implementation="eager").eval())
    prunable = PrunableModel(model, PruningConfig(ablation=ablation))
    batch = make_batch(model_type, batch_size=3, seq_len=8, padding="left")
    if ablation == "mean":
        prunable.compute_means([make_batch(model_type, batch_size=4, seq_len=8, seed=5)], show_progress=False)
    heads = torch.ones(layers, 4)
    heads[:, 0] = 0
    heads[empty] = 0
    prunable.set_masks(heads=heads)
    return prunable.eval(), batch


def _assert_generates_like(reference, model, batch, tol: float = 1e-5) -> None:
    ours, theirs = reference.generate(**batch, **GENERATE), model.generate(**batch, **GENERATE)
    assert torch.equal(ours.sequences, theirs.sequences)
    assert max(float((a - b).abs().max()) for a, b in zip(ours.scores, theirs.scores)) <= tol


def _placeholders_everywhere(prunable):
    """The export of 0.x: a placeholder head in every head-less layer (what older folders hold)."""
    original = slim_module.plan_layers

    def plan(*args, **kwargs):
        return original(*args[:6], zero_width_attention=False)

    with mock.patch.object(slim_module, "plan_layers", plan):
        return prunable.export_slim()


def _no_placeholder(prunable):
    original = slim_module.plan_layers

    def plan(*args, **kwargs):
        return original(*args[:6], zero_width_attention=True)

    with mock.patch.object(slim_module, "plan_layers", plan):
        return prunable.export_slim()


@pytest.mark.parametrize("ablation", ["zero", "mean"])
@pytest.mark.parametrize("empty", [[0], [1], [0, 2]], ids=["layer0", "layer1", "layers0and2"])
@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2", "qwen3"])
def test_only_the_length_layer_keeps_a_placeholder_and_generation_is_exact(model_type, empty, ablation):
    prunable, batch = _decoder(model_type, ablation, empty)
    slim = prunable.export_slim().eval()
    slots = [layer["query_slots"] for layer in slim.config.hf_heuristic_core_slim["layers"]]
    assert slots == [([-1] if index == 0 else []) if index in empty else slots[index] for index in range(3)]
    assert all(len(slots[index]) == 4 for index in range(3) if index not in empty)
    attention = slim.model.layers[2].self_attn
    assert (attention.q_proj.out_features, attention.k_proj.out_features) == ((0, 0) if 2 in empty else (32, 16)
                                                                            if model_type != "qwen3" else (64, 32))
    with torch.no_grad():
        assert _diff(prunable(**batch).logits, slim(**batch).logits, batch["attention_mask"]) <= 1e-5
    _assert_generates_like(prunable, slim, batch)
    saved = parameter_count(_placeholders_everywhere(prunable))
    head_dim = 16 if model_type == "qwen3" else 8
    bias = 3 * head_dim if model_type == "qwen2" else 0   # Qwen2's q/k/v have biases
    assert saved - parameter_count(slim) == (4 * head_dim * 32 + bias) * len([i for i in empty if i != 0])


@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
def test_without_the_layer0_placeholder_cached_generation_goes_wrong(model_type):
    """Why layer 0 keeps it (transformers 5.24): forward without a cache is exact, cached generate is not. Turns red
    when transformers reads the cache's length another way; then `cache_length_layer` can go."""
    prunable, batch = _decoder(model_type, "mean", [0])
    slim = _no_placeholder(prunable).eval()
    assert slim.config.hf_heuristic_core_slim["layers"][0]["query_slots"] == []
    with torch.no_grad():
        assert _diff(prunable(**batch).logits, slim(**batch).logits, batch["attention_mask"]) <= 1e-5
    ours, theirs = prunable.generate(**batch, **GENERATE), slim.generate(**batch, **GENERATE)
    assert max(float((a - b).abs().max()) for a, b in zip(ours.scores, theirs.scores)) > 0.1


def test_the_length_layers_follow_the_layer_types():
    assert cache_length_layers(tiny_config("llama", num_layers=3)) == (0,)
    assert cache_length_layers(tiny_config("mistral", num_layers=3, sliding_window=4)) == ()
    hybrid = tiny_config("qwen2", num_layers=3, sliding_window=4, use_sliding_window=True,
                         layer_types=["sliding_attention", "full_attention", "full_attention"])
    assert cache_length_layers(hybrid) == (1,)


@pytest.mark.parametrize("empty", [[0, 1], [0, 2]], ids=["first-full-empty", "first-full-kept"])
def test_a_sliding_layer_0_needs_no_placeholder_but_the_first_full_layer_does(empty):
    config = tiny_config("qwen2", num_layers=3, sliding_window=4, use_sliding_window=True,
                         layer_types=["sliding_attention", "full_attention", "full_attention"])
    torch.manual_seed(0)
    prunable, batch = _decoder("qwen2", "mean", empty, config=config)
    slim = prunable.export_slim().eval()
    slots = [len(layer["query_slots"]) for layer in slim.config.hf_heuristic_core_slim["layers"]]
    assert slots == ([0, 1, 4] if empty == [0, 1] else [0, 4, 0])
    _assert_generates_like(prunable, slim, batch)


def test_all_sliding_layers_need_no_placeholder():
    torch.manual_seed(0)
    prunable, batch = _decoder("mistral", "zero", [0, 1], config=tiny_config("mistral", num_layers=3,
                                                                             sliding_window=4))
    slim = prunable.export_slim().eval()
    assert [len(layer["query_slots"]) for layer in slim.config.hf_heuristic_core_slim["layers"]] == [0, 0, 4]
    _assert_generates_like(prunable, slim, batch)


def _assert_reloads_both_ways(slim, folder, prunable, batch, layer2_query_width: int) -> None:
    """Saved, then loaded with `load_slim` and with `AutoModelForCausalLM` through the folder's own code: layer 2's
    query width as recorded, logits within 1e-6 of the in-memory slim model, and generation like the hooked model."""
    save_slim(slim, folder)
    with torch.no_grad():
        expected = slim(**batch).logits
        for loaded in (load_slim(folder),
                       transformers.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()):
            assert loaded.model.layers[2].self_attn.q_proj.out_features == layer2_query_width
            loaded.set_attn_implementation("eager")   # as the tiny model was built
            assert float((loaded(**batch).logits - expected).abs().max()) <= 1e-6
            _assert_generates_like(prunable, loaded, batch)


@pytest.mark.parametrize("model_type,ablation", [("llama", "mean"), ("qwen2", "zero")])
def test_zero_head_layers_reload_with_load_slim_and_automodel(model_type, ablation, tmp_path):
    prunable, batch = _decoder(model_type, ablation, [0, 2])
    slim = prunable.export_slim().eval()
    assert slim.config.hf_heuristic_core_slim["layers"][2]["query_slots"] == []
    _assert_reloads_both_ways(slim, tmp_path / "slim", prunable, batch, layer2_query_width=0)


def test_older_folders_with_placeholders_still_load(tmp_path):
    prunable, batch = _decoder("llama", "mean", [0, 2])
    old = _placeholders_everywhere(prunable).eval()
    assert [layer["query_slots"] for layer in old.config.hf_heuristic_core_slim["layers"]][2] == [-1]
    _assert_reloads_both_ways(old, tmp_path / "old", prunable, batch, layer2_query_width=8)


def test_placeholders_stay_where_they_make_the_folder_stock(tmp_path):
    """Layers 0 and 2 keep one head (1 query, 1 kv slot), layer 1 none: with its placeholder every layer is
    (1, 1, 48), which a stock config states; without it the folder would need load_slim."""
    prunable, batch = _decoder("llama", "zero", [1])
    prunable.set_masks(heads=torch.tensor([[0., 1, 0, 0], [0, 0, 0, 0], [0, 0, 1, 0]]))
    slim = prunable.export_slim().eval()
    info = slim.config.hf_heuristic_core_slim
    assert info["stock"] and info["layers"][1]["query_slots"] == [-1]
    save_slim(slim, tmp_path / "slim")
    with torch.no_grad():
        plain = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "slim").eval()
        assert _diff(prunable(**batch).logits, plain(**batch).logits, batch["attention_mask"]) <= 1e-5


def test_beam_search_and_a_continued_cache_match_the_hooked_model():
    """Beam search reorders every cache layer (`index_select` on zero-head keys); a second generate continues a
    returned cache whose zero-head layers hold no elements."""
    prunable, batch = _decoder("llama", "mean", [1, 2])
    slim = prunable.export_slim().eval()
    assert [len(layer["query_slots"]) for layer in slim.config.hf_heuristic_core_slim["layers"]] == [4, 0, 0]
    beams = {"num_beams": 2, "num_return_sequences": 2, "max_new_tokens": 5, "do_sample": False, "pad_token_id": 0}
    assert torch.equal(prunable.generate(**batch, **beams), slim.generate(**batch, **beams))
    continued = []
    for model in (prunable, slim):
        first = model.generate(**batch, **{**GENERATE, "max_new_tokens": 3})
        mask = torch.cat([batch["attention_mask"], torch.ones(3, 3, dtype=torch.long)], dim=1)
        continued.append(model.generate(input_ids=first.sequences, attention_mask=mask, cache=first.cache,
                                        **{**GENERATE, "max_new_tokens": 3}).sequences)
    assert torch.equal(*continued)
