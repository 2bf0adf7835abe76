"""Reading what a weight mask covers must not run the mask (which needs a forward pass in training mode)."""

from __future__ import annotations

import torch
from torch import nn

from hf_heuristic_core import PrunableModel, PruningConfig


def _masked_mlp() -> PrunableModel:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 5), nn.ReLU(), nn.Linear(5, 3))
    config = PruningConfig(granularity="weight", relaxation="gumbel_sigmoid", mask_bias=False)
    return PrunableModel(net, config)


def test_selection_summary_in_training_mode_counts_the_stored_weights():
    prunable = _masked_mlp().train()
    summary = prunable.granularity.selection_summary()
    assert summary == {"masked_parameters": 2, "masked_entries": 6 * 5 + 5 * 3}


def test_training_step_on_a_plain_module_after_the_summary():
    prunable = _masked_mlp().train()
    prunable.granularity.selection_summary()
    loss = prunable(torch.randn(4, 6)).pow(2).mean()
    loss.backward()
    grads = [p.grad for p in prunable.mask_logits.parameters()]
    assert all(g is not None and torch.isfinite(g).all() and g.abs().sum() > 0 for g in grads)
