"""Weight masks on an explicitly targeted nn.Embedding (Subtask Induction masks GPT-2's token embedding)."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.errors import PruningError


def _gpt2(tied: bool) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=23, n_positions=8, n_embd=16, n_layer=2, n_head=2, n_inner=32,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=tied)
    return GPT2LMHeadModel(config).eval()


def _logits(model: torch.nn.Module) -> torch.Tensor:
    ids = torch.tensor([[1, 5, 22, 3], [7, 7, 22, 0]])
    with torch.no_grad():
        return model(input_ids=ids).logits


def test_binary_embedding_mask_equals_entries_zeroed_by_hand():
    model = _gpt2(tied=False)
    reference = copy.deepcopy(model)
    pm = PrunableModel(model, PruningConfig(granularity="weight", relaxation="continuous_sparsification",
                                            target_modules=["wte", "c_fc"]))
    assert set(pm.mask_shapes()) == {"transformer.wte.weight", "transformer.h.0.mlp.c_fc.weight",
                                   "transformer.h.1.mlp.c_fc.weight"}
    generator = torch.Generator().manual_seed(3)
    masks = {k: (torch.rand(shape, generator=generator) > 0.4).float() for k, shape in pm.mask_shapes().items()}
    with torch.no_grad():
        for name, mask in masks.items():
            reference.get_parameter(name).mul_(mask)
    with pm.masks_applied(masks):
        masked = _logits(pm)
    assert torch.allclose(masked, _logits(reference), atol=1e-6)
    assert not torch.allclose(masked, _logits(model), atol=1e-3)   # the mask changes the output at all


def test_all_ones_embedding_mask_equals_unwrapped_model_exactly():
    model = _gpt2(tied=False)
    original = _logits(model)
    pm = PrunableModel(model, PruningConfig(granularity="weight", target_modules=["wte"]))
    with pm.masks_applied({k: torch.ones(s) for k, s in pm.mask_shapes().items()}):
        assert torch.equal(_logits(pm), original)
    assert torch.equal(_logits(pm.unwrap()), original)


def test_default_selection_leaves_embeddings_out():
    pm = PrunableModel(_gpt2(tied=False), PruningConfig(granularity="weight"))
    assert not any("wte" in k or "wpe" in k for k in pm.mask_shapes())
    assert len(pm.mask_shapes()) == 9   # 4 Conv1D per layer x 2 + the untied lm_head


def test_regex_can_target_an_embedding():
    pm = PrunableModel(_gpt2(tied=False), PruningConfig(granularity="weight", target_modules=r"transformer\.wte"))
    assert list(pm.mask_shapes()) == ["transformer.wte.weight"]


def test_tied_embedding_is_refused_with_the_fix():
    with pytest.raises(PruningError, match="tie_word_embeddings=False"):
        PrunableModel(_gpt2(tied=True), PruningConfig(granularity="weight", target_modules=["wte", "c_fc"]))
