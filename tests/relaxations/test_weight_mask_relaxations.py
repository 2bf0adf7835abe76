"""Continuous sparsification and Gumbel-sigmoid against their formulas and the papers' constants."""

from __future__ import annotations

import math

import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningConfig, PruningError
from hf_heuristic_core.relaxations import get_relaxation
from hf_heuristic_core.relaxations.continuous_sparsification import ContinuousSparsification, beta_after_epochs
from hf_heuristic_core.relaxations.gumbel_sigmoid import GumbelSigmoid
from hf_heuristic_core.relaxations.hard_concrete import HardConcrete
from tiny_models import tiny_model


def test_continuous_sparsification_defaults_are_lepori_s():
    config = PruningConfig(relaxation="continuous_sparsification")
    cs = get_relaxation(config.relaxation).from_config(config)
    assert (cs.beta, cs.beta_max, cs.init) == (1.0, 200.0, 0.0)
    assert config.binarization == "threshold" and config.mask_samples == 1
    assert torch.equal(cs.init_logits((2, 3)), torch.zeros(2, 3))


def test_continuous_sparsification_mask_penalty_and_eval_rule():
    cs = ContinuousSparsification(beta=3.0)
    s = torch.tensor([-0.5, -0.01, 0.0, 0.02, 0.7], requires_grad=True)
    expected = 1 / (1 + torch.exp(-3.0 * s.detach()))
    torch.testing.assert_close(cs.sample(s), expected)   # no noise: two samples agree
    torch.testing.assert_close(cs.sample(s), cs.sample(s))
    torch.testing.assert_close(cs.penalty(s), expected.sum())
    cs.penalty(s).backward()
    torch.testing.assert_close(s.grad, 3.0 * expected * (1 - expected))
    assert cs.threshold_masks(s, 0.5).tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]   # 1[s > 0], any beta
    assert ContinuousSparsification(beta=200.0).threshold_masks(s, 0.5).tolist() == [0.0, 0.0, 0.0, 1.0, 1.0]


def test_beta_schedule_is_exponential_per_epoch_and_ends_at_beta_max():
    values = [beta_after_epochs(e, 90, 200.0) for e in range(91)]
    assert values[0] == 1.0 and values[-1] == pytest.approx(200.0)
    ratios = [b / a for a, b in zip(values, values[1:])]
    assert all(r == pytest.approx(200.0 ** (1 / 90)) for r in ratios)
    assert beta_after_epochs(120, 90, 200.0) == pytest.approx(200.0)


def test_gumbel_sigmoid_defaults_are_csordas_s():
    config = PruningConfig(relaxation="gumbel_sigmoid")
    gs = get_relaxation(config.relaxation).from_config(config)
    assert gs.tau == 1.0 and config.mask_samples == 4 and config.binarization == "threshold"
    assert gs.init_logit == pytest.approx(math.log(9.0))
    torch.testing.assert_close(torch.sigmoid(gs.init_logits((3,))), torch.full((3,), 0.9))


@pytest.mark.parametrize("tau", [1.0, 0.3, 3.0])
def test_gumbel_sigmoid_keep_probability_is_sigmoid_of_the_logit_for_any_tau(tau):
    gs = GumbelSigmoid(tau=tau)
    logits = torch.tensor([-2.0, -0.5, 0.0, 1.0, 2.197]).repeat(40000, 1)
    samples = gs.sample(logits, torch.Generator().manual_seed(0))
    assert set(samples.unique().tolist()) <= {0.0, 1.0}
    torch.testing.assert_close(samples.mean(0), torch.sigmoid(logits[0]), atol=0.01, rtol=0)


def test_gumbel_sigmoid_is_straight_through_with_the_soft_sample_s_gradient():
    gs = GumbelSigmoid(tau=0.5)
    logits = torch.tensor([0.3, -0.2, 1.5], requires_grad=True)
    hard = gs.sample(logits, torch.Generator().manual_seed(4))
    soft = gs.soft_sample(logits.detach(), torch.Generator().manual_seed(4))
    assert torch.equal(hard.detach(), (soft > 0.5).float())
    hard.sum().backward()
    torch.testing.assert_close(logits.grad, soft * (1 - soft) / 0.5)


def test_gumbel_penalty_is_linear_in_the_logits_and_eval_thresholds_at_zero():
    gs = GumbelSigmoid()
    logits = torch.tensor([5.0, -3.0, 0.1, -0.1], requires_grad=True)
    gs.penalty(logits).backward()
    assert torch.equal(logits.grad, torch.ones(4))   # constant gradient, even for confident logits
    assert gs.threshold_masks(logits, 0.5).tolist() == [1.0, 0.0, 1.0, 0.0]


@pytest.mark.parametrize("relaxation", ["hard_concrete", "continuous_sparsification", "gumbel_sigmoid"])
@pytest.mark.parametrize("granularity", ["unit", "neuron", "weight"])
def test_every_relaxation_trains_on_every_granularity(relaxation, granularity):
    from tiny_models import make_batch
    settings = {"init_mean": 0.5} if relaxation == "hard_concrete" else {}   # unclamped hard concrete
    config = PruningConfig(granularity=granularity, relaxation=relaxation, relaxation_settings=settings,
                           ablation="zero" if granularity != "weight" else None)
    wrapped = PrunableModel(tiny_model("bert"), config)
    wrapped.train()
    wrapped(**make_batch("bert")).logits.square().sum().backward()
    grads = [p.grad for _, p in wrapped.mask_logits.items()]
    assert all(g is not None for g in grads) and any(bool(g.abs().sum() > 0) for g in grads)


def test_an_unsupported_granularity_relaxation_pair_is_refused():
    from hf_heuristic_core.granularity import GRANULARITIES, GRANULARITY_SETTINGS, register_granularity
    from hf_heuristic_core.granularity.unit import UnitGranularity

    class HardConcreteOnly(UnitGranularity):
        name = "hc_only_units"
        relaxations = ("hard_concrete",)

    register_granularity("hc_only_units", HardConcreteOnly)
    try:
        with pytest.raises(PruningError, match="'hc_only_units' granularity does not support the 'gumbel_sigmoid' "
                                               r"relaxation; choose one of \['hard_concrete'\]"):
            PrunableModel(tiny_model("bert"), PruningConfig(granularity="hc_only_units", relaxation="gumbel_sigmoid"))
    finally:
        GRANULARITIES._entries.pop("hc_only_units", None)
        GRANULARITY_SETTINGS._entries.pop("hc_only_units", None)


def test_hard_concrete_keeps_its_topk_default():
    assert PruningConfig().binarization == "topk" and PruningConfig().ablation == "mean"
    assert isinstance(get_relaxation("hard_concrete").from_config(PruningConfig()), HardConcrete)
    assert PruningConfig(granularity="weight").ablation == "zero"
