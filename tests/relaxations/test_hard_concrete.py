"""PrunableModel's hard-concrete masks: the paper's constants, the expected L0 and sparsity, the
deterministic value and the sampling formula, each computed by hand.

Every reference is computed by hand or by editing weights / own hooks, never through the package's mask
code. (Moved from tests/test_model.py.)
"""

from __future__ import annotations

import math

import pytest
import torch

from hf_heuristic_core import HardConcrete, PruningConfig

from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import BETA, EPS, HEADS, LAYERS, L_LEFT, R_RIGHT, set_logits, sigmoid, tiny_model, wrap

pytestmark = pytest.mark.usefixtures("one_torch_thread")

def test_config_defaults_are_the_recipe():
    config = PruningConfig()
    assert (config.limit_left, config.limit_right, config.temperature, config.eps) == (L_LEFT, R_RIGHT, BETA, EPS)
    assert (config.init_mean, config.init_std) == (10.0, 0.01)
    assert config.ablation == "mean"
    assert config.prune_heads and config.prune_mlps


def test_log_alpha_initialized_from_normal_10_001_in_fp32():
    torch.manual_seed(0)
    pm = wrap(tiny_model("llama"), ablation="zero")
    for logit, shape in ((pm.mask_logits.heads, (LAYERS, HEADS)), (pm.mask_logits.mlps, (LAYERS,))):
        assert logit.dtype == torch.float32 and tuple(logit.shape) == shape and logit.requires_grad
        assert torch.all((logit - 10).abs() < 0.06)  # 6 sigma
    big = HardConcrete.from_config(PruningConfig()).init_logits((200, 100))
    assert big.dtype == torch.float32
    assert abs(float(big.mean()) - 10.0) < 1e-3
    assert abs(float(big.std()) - 0.01) < 5e-4
    # The wrapped model's own parameters are frozen; the mask logits train.
    assert not any(p.requires_grad for p in pm.model.parameters())
    trainable = {n for n, p in pm.named_parameters() if p.requires_grad}
    assert {"mask_state.logits.heads", "mask_state.logits.mlps"} <= trainable
    assert not any(n.startswith("model.") for n in trainable)


def test_reset_masks_starts_a_new_run_reproducibly_and_keeps_forced_units():
    pm = wrap(tiny_model("bert"), init_mean=3.0, init_std=0.5)
    set_logits(pm, heads=torch.full((LAYERS, HEADS), -7.0), mlps=torch.full((LAYERS,), 7.0))
    pm.force_units(heads=[(0, 1)], keep=False)
    pm.set_masks(heads=torch.ones(LAYERS, HEADS))

    pm.reset_masks(seed=5)
    generator = torch.Generator().manual_seed(5)    # heads first, then MLPs, from N(init_mean, init_std)
    expected_heads = torch.empty(LAYERS, HEADS).normal_(3.0, 0.5, generator=generator)
    expected_mlps = torch.empty(LAYERS).normal_(3.0, 0.5, generator=generator)
    expected_heads[0, 1] = -10.0                     # still pinned out
    assert torch.equal(pm.mask_logits.heads.detach(), expected_heads)
    assert torch.equal(pm.mask_logits.mlps.detach(), expected_mlps)
    assert pm.mask_state.fixed.get("heads") is None and pm.mask_state.fixed.get("mlps") is None
    first = pm.mask_state_dict()
    pm.reset_masks(seed=6)
    assert not torch.equal(pm.mask_logits.mlps.detach(), expected_mlps)
    pm.reset_masks(seed=5)
    assert all(torch.equal(first[k], v) for k, v in pm.mask_state_dict().items())


def test_expected_l0_by_hand():
    hc = HardConcrete()
    # P(z != 0) = sigmoid(log_alpha - beta * log(-l / r)); at log_alpha = 0: sigmoid((2/3) * log 11) = 0.83183...
    expected0 = sigmoid(BETA * math.log(11.0))
    assert abs(expected0 - 0.8318) < 1e-4
    values = torch.tensor([0.0, -3.0, 2.5, 10.0], dtype=torch.float64)
    got = hc.prob_nonzero(values)
    for v, g in zip(values.tolist(), got.tolist()):
        assert g == pytest.approx(sigmoid(v - BETA * math.log(0.1 / 1.1)), abs=1e-12)
    assert float(got[0]) == pytest.approx(expected0, abs=1e-12)


def test_expected_sparsity_by_hand_and_differentiable():
    pm = wrap(tiny_model("llama"), ablation="zero")
    heads = torch.tensor([[0.0, -3.0, 2.5, 10.0], [1.0, -1.0, 0.5, -10.0]])
    mlps = torch.tensor([3.0, -2.0])
    set_logits(pm, heads, mlps)
    kept = sum(sigmoid(v + BETA * math.log(11.0)) for v in heads.flatten().tolist() + mlps.tolist())
    expected = 1 - kept / 10
    value = pm.expected_sparsity()
    assert float(value) == pytest.approx(expected, abs=1e-6)
    value.backward()
    assert pm.mask_logits.heads.grad is not None and (pm.mask_logits.heads.grad < 0).all()


def test_deterministic_value_by_hand():
    hc = HardConcrete()
    log_alpha = torch.tensor([0.0, 10.0, -10.0, 1.0])
    expected = [min(max(sigmoid(v) * 1.2 - 0.1, 0.0), 1.0) for v in log_alpha.tolist()]
    assert hc.deterministic(log_alpha).tolist() == pytest.approx(expected, abs=1e-6)
    assert float(hc.deterministic(torch.tensor(0.0))) == pytest.approx(0.5, abs=1e-7)


def test_sample_formula_by_hand_with_generator():
    hc = HardConcrete()
    log_alpha = torch.linspace(-3, 3, 50, dtype=torch.float64)
    sample = hc.sample(log_alpha, generator=torch.Generator().manual_seed(123))
    u = torch.rand(50, generator=torch.Generator().manual_seed(123), dtype=torch.float64)
    u = u * (1 - 2 * EPS) + EPS
    s = torch.sigmoid((torch.log(u) - torch.log(1 - u) + log_alpha) / BETA)
    expected = (s * (R_RIGHT - L_LEFT) + L_LEFT).clamp(0, 1)
    torch.testing.assert_close(sample, expected, atol=1e-10, rtol=0)


def test_samples_always_in_unit_interval_and_hit_both_ends():
    hc = HardConcrete()
    generator = torch.Generator().manual_seed(0)
    samples = hc.sample(torch.zeros(20000), generator=generator)
    assert samples.min() >= 0 and samples.max() <= 1
    assert (samples == 0).any() and (samples == 1).any() and ((samples > 0) & (samples < 1)).any()
    # Empirical P(z != 0) at log_alpha = 0 matches the expected L0.
    assert float((samples != 0).float().mean()) == pytest.approx(sigmoid(BETA * math.log(11.0)), abs=0.015)
    extreme = hc.sample(torch.tensor([-1e4, 1e4, 0.0]).repeat(1000), generator=generator)
    assert torch.isfinite(extreme).all() and extreme.min() >= 0 and extreme.max() <= 1
