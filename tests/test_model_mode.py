"""The wrapper starts in the wrapped model's mode, so wrapping an eval model never turns its dropout back on."""

from __future__ import annotations

import torch

from hf_heuristic_core import PrunableModel, PruningConfig
from tests.tiny_models import make_batch, tiny_model


def _dropout_modules(model):
    return [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]


def test_wrapping_an_eval_model_gives_an_eval_wrapper_and_deterministic_masks():
    model = tiny_model("bert").eval()
    prunable = PrunableModel(model, PruningConfig(ablation="zero"))
    assert not prunable.training and not any(m.training for m in _dropout_modules(model))
    batch = make_batch("bert")
    with torch.no_grad():
        assert torch.equal(prunable(**batch).logits, prunable(**batch).logits)


def test_compute_means_leaves_an_eval_wrapped_model_without_dropout():
    model = tiny_model("bert").eval()
    prunable = PrunableModel(model, PruningConfig(ablation="mean"))
    prunable.compute_means([make_batch("bert", seed=s) for s in range(2)], show_progress=False)
    assert not prunable.training and not any(m.training for m in _dropout_modules(model))


def test_wrapping_a_training_model_gives_a_training_wrapper():
    model = tiny_model("bert").train()
    prunable = PrunableModel(model, PruningConfig())
    assert prunable.training and all(m.training for m in _dropout_modules(model))
