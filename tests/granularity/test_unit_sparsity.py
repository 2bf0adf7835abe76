"""Sparsity of head and MLP-block masks: counted per unit and weighted by parameters, by hand.

Every reference is computed by hand or by editing weights / own hooks, never through the package's mask
code. (Moved from tests/test_model.py.)
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hf_heuristic_core import PrunableModel, PruningConfig

from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import HEADS, LAYERS, layers_of, tiny_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _wrap(model, **config) -> PrunableModel:
    return PrunableModel(model, PruningConfig(**config))


def _param_count(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


@pytest.mark.parametrize("model_type, attention, mlp_parts", [
    ("llama", "self_attn", ["mlp"]),
    ("gpt2", "attn", ["mlp"]),
])
def test_sparsity_per_unit_and_parameter_weighted_by_hand(model_type, attention, mlp_parts):
    model = tiny_model(model_type)
    layer0 = layers_of(model, model_type)[0]
    per_head = _param_count(layer0.get_submodule(attention)) / HEADS
    per_mlp = sum(_param_count(layer0.get_submodule(p)) for p in mlp_parts)
    if model_type == "llama":  # q 32x32, k and v 32x16 (2 KV heads), o 32x32; gate, up, down 32x48
        assert (per_head, per_mlp) == ((1024 + 512 + 512 + 1024) / 4, 3 * 32 * 48)
    pm = _wrap(model, ablation="zero")
    heads = torch.ones(LAYERS, HEADS)
    heads[0, 1] = heads[1, 2] = heads[1, 3] = 0
    pm.set_masks(heads=heads, mlps=torch.tensor([1.0, 0.0]))
    assert pm.sparsity() == pytest.approx(4 / 10)
    weighted = (3 * per_head + per_mlp) / (LAYERS * HEADS * per_head + LAYERS * per_mlp)
    assert pm.sparsity(weighted=True) == pytest.approx(weighted)
    pm.clear_masks()
    assert pm.sparsity() == 0.0 and pm.sparsity(weighted=True) == 0.0
    heads_only = _wrap(tiny_model(model_type), ablation="zero", prune_mlps=False)
    heads_only.set_masks(heads=heads)
    assert heads_only.sparsity() == pytest.approx(3 / 8)
    assert heads_only.sparsity(weighted=True) == pytest.approx(3 / 8)
