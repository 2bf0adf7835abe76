"""Mean collectors are hook objects with a state dict: partial statistics can be saved and resumed exactly."""

from __future__ import annotations

import torch
from torch import nn

from hf_heuristic_core.ablation.means import ActivationMean
from hf_heuristic_core.granularity.base import ActivationSite


def test_activation_mean_counts_real_tokens_and_round_trips_its_state():
    torch.manual_seed(0)
    layer = nn.Linear(4, 3)
    mask = {"value": None}
    first = ActivationMean(ActivationSite(layer, "output"), lambda x: mask["value"])
    handle = first.attach()
    x1, m1 = torch.randn(2, 5, 4), torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    x2, m2 = torch.randn(1, 5, 4), torch.tensor([[1, 1, 0, 0, 0]])
    mask["value"] = m1
    layer(x1)
    handle.remove()
    second = ActivationMean(ActivationSite(layer, "output"), lambda x: mask["value"])
    second.load_state_dict(first.state_dict())   # resume from the saved statistics
    handle = second.attach()
    mask["value"] = m2
    layer(x2)
    handle.remove()
    with torch.no_grad():
        outputs = torch.cat([layer(x1)[m1.bool()], layer(x2)[m2.bool()]])
    assert second.count == 10
    torch.testing.assert_close(second.mean(), outputs.mean(0))


def test_input_site_reads_the_module_input():
    layer = nn.Linear(4, 3)
    collector = ActivationMean(ActivationSite(layer, "input"), lambda x: None)
    handle = collector.attach()
    x = torch.randn(2, 3, 4)
    layer(x)
    handle.remove()
    assert collector.count == 6
    torch.testing.assert_close(collector.mean(), x.reshape(-1, 4).mean(0))
