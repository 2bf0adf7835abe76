"""Architecture detection: module-name suffixes find the same modules as the map, unknown architectures get an
error naming the candidates and the override, and overrides make them work.

Every reference is computed by hand or by editing weights / own hooks, never through the package's mask
code. (Moved from tests/test_model.py.)
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn
from transformers import PretrainedConfig

from hf_heuristic_core import PrunableModel, PruningConfig, UnsupportedArchitectureError, architectures

from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import (HEAD_DIM, HEADS, HIDDEN, INTERMEDIATE, LAYERS, MODEL_TYPES, VOCAB, attention_output, logits_of,
                         make_batch, mlp_output, tiny_model, zero_head_inputs)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _wrap(model, **config) -> PrunableModel:
    return PrunableModel(model, PruningConfig(**config))


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_suffix_detection_finds_the_same_modules_as_the_map(model_type, monkeypatch):
    model = tiny_model(model_type)
    monkeypatch.delitem(architectures.ARCHITECTURES, model_type)
    pm = _wrap(model, ablation="zero")
    assert pm.architecture.detected
    for layer in range(LAYERS):
        assert pm.architecture.attention_outputs[layer] is attention_output(model, model_type, layer)
        assert pm.architecture.mlp_outputs[layer] is mlp_output(model, model_type, layer)
    assert pm.head_dim == HEAD_DIM[model_type]


def test_detected_llama_zero_ablation_equivalence(monkeypatch):
    monkeypatch.delitem(architectures.ARCHITECTURES, "llama")
    model = tiny_model("llama")
    reference = copy.deepcopy(model)
    zero_head_inputs(attention_output(reference, "llama", 1), [0, 2], HEAD_DIM["llama"])
    pm = _wrap(model, ablation="zero").eval()
    pm.set_masks(heads=torch.tensor([[1.0, 1, 1, 1], [0, 1, 0, 1]]))
    batch = make_batch("llama")
    torch.testing.assert_close(logits_of(pm, batch), logits_of(reference, batch), atol=1e-6, rtol=1e-5)


class ToyConfig(PretrainedConfig):
    model_type = "toy_arch"

    def __init__(self, hidden=HIDDEN, heads=HEADS, layers=LAYERS, with_heads=True, **kwargs):
        super().__init__(**kwargs)
        self.hidden = hidden
        if with_heads:
            self.num_attention_heads = heads
        self.num_hidden_layers = layers


class ToyBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.mix_in = nn.Linear(HIDDEN, HIDDEN)
        self.mix = nn.Linear(HIDDEN, HIDDEN)
        self.ffn_in = nn.Linear(HIDDEN, INTERMEDIATE)
        self.ffn_out = nn.Linear(INTERMEDIATE, HIDDEN)

    def forward(self, x):
        x = x + self.mix(torch.tanh(self.mix_in(x)))
        return x + self.ffn_out(torch.relu(self.ffn_in(x)))


class ToyModel(nn.Module):
    def __init__(self, config, as_list=True):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        blocks = [ToyBlock() for _ in range(config.num_hidden_layers)]
        if as_list:
            self.blocks = nn.ModuleList(blocks)
        else:
            self.first, self.second = blocks
        self.head = nn.Linear(HIDDEN, 3)

    def forward(self, input_ids, attention_mask=None):
        x = self.embed(input_ids)
        for block in (self.blocks if hasattr(self, "blocks") else (self.first, self.second)):
            x = block(x)
        return self.head(x)


def _toy(**kwargs):
    torch.manual_seed(0)
    return ToyModel(ToyConfig(**kwargs)).eval()


def test_unknown_architecture_error_names_type_candidates_and_override():
    with pytest.raises(UnsupportedArchitectureError, match="toy_arch") as info:
        _wrap(_toy(), ablation="zero")
    message = str(info.value)
    for candidate in ("mix", "ffn_in", "ffn_out"):
        assert f"'{candidate}'" in message
    assert "PruningConfig(" in message
    # No layer list at all.
    torch.manual_seed(0)
    with pytest.raises(UnsupportedArchitectureError, match="toy_arch") as info:
        _wrap(ToyModel(ToyConfig(), as_list=False), ablation="zero")
    assert "PruningConfig(layers_path=" in str(info.value)


def test_overrides_make_an_unknown_architecture_work():
    model = _toy()
    reference = copy.deepcopy(model)
    zero_head_inputs(reference.blocks[1].mix, [2], HIDDEN // HEADS)
    with torch.no_grad():
        reference.blocks[0].ffn_out.weight.zero_()
        reference.blocks[0].ffn_out.bias.zero_()
    pm = _wrap(model, ablation="zero", layers_path="blocks", attention_output="mix", mlp_output="ffn_out").eval()
    assert (pm.num_layers, pm.num_heads, pm.head_dim) == (LAYERS, HEADS, HIDDEN // HEADS)
    pm.set_masks(heads=torch.tensor([[1.0, 1, 1, 1], [1, 1, 0, 1]]), mlps=torch.tensor([0.0, 1.0]))
    ids = make_batch("bert")["input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(pm(ids), reference(ids), atol=1e-6, rtol=1e-5)


def test_num_heads_missing_from_config_needs_override():
    with pytest.raises(UnsupportedArchitectureError, match=r"num_heads"):
        _wrap(_toy(with_heads=False), ablation="zero", attention_output="mix", mlp_output="ffn_out")
    pm = _wrap(_toy(with_heads=False), ablation="zero", attention_output="mix", mlp_output="ffn_out", num_heads=2)
    assert (pm.num_heads, pm.head_dim) == (2, HIDDEN // 2)


def test_num_heads_override_on_a_mapped_model():
    model = tiny_model("llama")
    reference = copy.deepcopy(model)
    zero_head_inputs(attention_output(reference, "llama", 0), [1], 16)  # "head" 1 of 2 = columns 16:32
    pm = _wrap(model, ablation="zero", num_heads=2).eval()
    assert (pm.num_heads, pm.head_dim) == (2, 16)
    pm.set_masks(heads=torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
    batch = make_batch("llama")
    torch.testing.assert_close(logits_of(pm, batch), logits_of(reference, batch), atol=1e-6, rtol=1e-5)
    with pytest.raises(UnsupportedArchitectureError, match="multiple of num_heads"):
        _wrap(tiny_model("llama"), ablation="zero", num_heads=3)


def test_bad_path_override_lists_candidates():
    with pytest.raises(UnsupportedArchitectureError, match="bert") as info:
        _wrap(tiny_model("bert"), ablation="zero", attention_output="attention.nope")
    assert "attention.output.dense" in str(info.value)
    with pytest.raises(UnsupportedArchitectureError, match="layers_path"):
        _wrap(tiny_model("bert"), ablation="zero", layers_path="encoder.nope")
