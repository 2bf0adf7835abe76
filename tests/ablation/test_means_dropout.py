"""With keep_dropout, MLP means are taken after the MLP's output dropout (as in the paper's code), with the dropout
active; without it, nothing changes. The registry's dropout paths are checked against the modeling code."""

from __future__ import annotations

import pytest
import torch
from tiny_models import (
    HOOK_SITES,
    layers_of,
    make_batch,
    mlp_output,
    real_token_means,
    tiny_bert_classifier,
    tiny_model,
)

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.architectures.registry import ARCHITECTURES


def _batches():
    return [make_batch("bert", batch_size=3, seq_len=7, seed=0),
            make_batch("bert", batch_size=4, seq_len=6, seed=1, lengths=[6, 2, 5, 3])]


def _hand_means(model, batches, train: bool, mlp_site: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Our own hooks: heads at the attention output projection's input, MLPs at `mlp_site` of each layer."""
    layers = model.bert.encoder.layer
    model.train(train)
    means = real_token_means(model, [layer.attention.output.dense for layer in layers],
                             [layer.get_submodule(mlp_site) for layer in layers], batches)
    model.eval()
    return means


def _computed(model, batches, **kwargs):
    wrapped = PrunableModel(model, PruningConfig())
    try:
        wrapped.compute_means(batches, show_progress=False, **kwargs)
    finally:
        wrapped.unwrap()
    means = wrapped.get_means()
    return means["heads"].flatten(-2).double(), means["mlps"].double(), wrapped.means_info


def test_keep_dropout_takes_mlp_means_after_the_output_dropout_in_train_mode():
    model, batches = tiny_bert_classifier(dropout=0.3), _batches()
    torch.manual_seed(7)
    heads, mlps, info = _computed(model, batches, keep_dropout=True)
    torch.manual_seed(7)   # the same dropout draws: same forward calls in the same order
    hand_heads, hand_mlps = _hand_means(model, batches, train=True, mlp_site="output.dropout")
    torch.testing.assert_close(heads, hand_heads, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mlps, hand_mlps, atol=1e-5, rtol=1e-5)
    assert info["keep_dropout"] is True
    torch.manual_seed(7)   # before the dropout: different numbers, so the site matters
    _, before = _hand_means(model, batches, train=True, mlp_site="output.dense")
    assert float((before - mlps).abs().max()) > 1e-2
    assert not model.training   # the wrapped model's mode is restored


def test_without_keep_dropout_means_are_eval_mode_means_at_the_projection():
    model, batches = tiny_bert_classifier(dropout=0.3), _batches()
    heads, mlps, info = _computed(model, batches)
    hand_heads, hand_mlps = _hand_means(model, batches, train=False, mlp_site="output.dense")
    torch.testing.assert_close(heads, hand_heads, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mlps, hand_mlps, atol=1e-5, rtol=1e-5)
    assert info["keep_dropout"] is False


def test_keep_dropout_without_dropout_changes_nothing():
    model, batches = tiny_bert_classifier(dropout=0.0), _batches()
    plain = _computed(model, batches)
    kept = _computed(model, batches, keep_dropout=True)
    assert torch.equal(plain[0], kept[0]) and torch.equal(plain[1], kept[1])


@pytest.mark.parametrize("model_type", sorted(t for t in HOOK_SITES if ARCHITECTURES[t].mlp_output_dropout))
def test_registry_mlp_output_dropout_follows_the_mlp_output_projection(model_type):
    """The registered dropout is an nn.Dropout fed exactly the MLP output projection's output."""
    model = tiny_model(model_type)
    path = ARCHITECTURES[model_type].mlp_output_dropout
    for index, layer in enumerate(layers_of(model, model_type)):
        dropout = layer.get_submodule(path)
        assert isinstance(dropout, torch.nn.Dropout)
        seen: dict[str, torch.Tensor] = {}
        handles = [mlp_output(model, model_type, index).register_forward_hook(
                       lambda m, a, out, seen=seen: seen.setdefault("projection", out)),
                   dropout.register_forward_pre_hook(lambda m, a, seen=seen: seen.setdefault("dropout", a[0]))]
        with torch.no_grad():
            model(**make_batch(model_type))
        for handle in handles:
            handle.remove()
        assert seen["dropout"] is seen["projection"] or torch.equal(seen["dropout"], seen["projection"])


@pytest.mark.parametrize("model_type", ["llama", "opt"])
def test_keep_dropout_keeps_the_projection_where_the_mlp_has_no_dropout_module(model_type):
    model = tiny_model(model_type)
    batches = [make_batch(model_type)]
    assert ARCHITECTURES[model_type].mlp_output_dropout is None
    plain = _computed_any(model, batches)
    kept = _computed_any(model, batches, keep_dropout=True)   # dropout probabilities are 0 in the tiny models
    assert torch.equal(plain, kept)


def _computed_any(model, batches, **kwargs):
    wrapped = PrunableModel(model, PruningConfig())
    try:
        wrapped.compute_means(batches, show_progress=False, **kwargs)
    finally:
        wrapped.unwrap()
    return wrapped.get_means()["mlps"]
