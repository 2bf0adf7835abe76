"""Binarization: exact top-k counts on the lowest logits, globally and per layer, the default expected
sparsity, and the paper's threshold rule, against hand computations.

Every reference is computed by hand or by editing weights / own hooks, never through the package's mask
code. (Moved from tests/test_model.py.)
"""

from __future__ import annotations

import math

import pytest
import torch

from hf_heuristic_core import topk_binarize

from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import BETA, HEADS, LAYERS, set_logits, sigmoid, tiny_model, wrap

pytestmark = pytest.mark.usefixtures("one_torch_thread")

def test_topk_binarize_exact_counts_and_lowest_units():
    generator = torch.Generator().manual_seed(0)
    scores = torch.randperm(40, generator=generator).float() - 20
    for sparsity in (0.0, 0.1, 0.25, 0.3, 0.55, 0.9, 0.99):
        mask = topk_binarize(scores, sparsity)
        k = round(sparsity * 40)
        assert int((mask == 0).sum()) == k
        assert set(torch.nonzero(mask == 0).flatten().tolist()) == set(torch.argsort(scores)[:k].tolist())
    groups = torch.arange(40) % 4
    mask = topk_binarize(scores, 0.3, groups)
    for g in range(4):
        members = torch.nonzero(groups == g).flatten()
        k = round(0.3 * 10)
        pruned = set(members[mask[members] == 0].tolist())
        assert len(pruned) == k
        assert pruned == set(members[torch.argsort(scores[members])[:k]].tolist())


HAND_HEADS = torch.tensor([[3.0, -2.0, 5.0, 0.5], [-1.0, 4.0, 2.0, 6.0]])
HAND_MLPS = torch.tensor([1.0, -3.0])


def _lowest_units(heads, mlps, k):
    units = [(float(heads[l, h]), ("heads", l, h)) for l in range(LAYERS) for h in range(HEADS)]
    units += [(float(mlps[l]), ("mlps", l)) for l in range(LAYERS)]
    return {name for _, name in sorted(units)[:k]}


def _pruned(masks):
    names = {("heads", l, h) for l in range(LAYERS) for h in range(HEADS) if masks["heads"][l, h] == 0}
    return names | {("mlps", l) for l in range(LAYERS) if masks["mlps"][l] == 0}


@pytest.mark.parametrize("sparsity", [0.0, 0.1, 0.3, 0.5, 0.8, 0.9])
def test_get_masks_sparsity_prunes_the_lowest_log_alpha_globally(sparsity):
    pm = wrap(tiny_model("llama"), ablation="zero")
    set_logits(pm, HAND_HEADS, HAND_MLPS)
    masks = pm.get_masks(sparsity=sparsity)
    assert masks["heads"].shape == (LAYERS, HEADS) and masks["mlps"].shape == (LAYERS,)
    assert set(torch.cat([masks["heads"].flatten(), masks["mlps"]]).unique().tolist()) <= {0.0, 1.0}
    k = round(sparsity * 10)
    assert _pruned(masks) == _lowest_units(HAND_HEADS, HAND_MLPS, k)
    assert pm.sparsity(masks=masks) == pytest.approx(k / 10)


@pytest.mark.parametrize("sparsity", [0.2, 0.4, 0.6])
def test_get_masks_sparsity_per_layer(sparsity):
    pm = wrap(tiny_model("llama"), ablation="zero", binarization_scope="per_layer")
    set_logits(pm, HAND_HEADS, HAND_MLPS)
    masks = pm.get_masks(sparsity=sparsity)
    k = round(sparsity * (HEADS + 1))
    for layer in range(LAYERS):
        units = [(float(HAND_HEADS[layer, h]), ("heads", layer, h)) for h in range(HEADS)]
        units.append((float(HAND_MLPS[layer]), ("mlps", layer)))
        expected = {name for _, name in sorted(units)[:k]}
        got = {n for n in _pruned(masks) if n[1] == layer}
        assert got == expected


def test_default_binary_masks_use_expected_sparsity_rounded():
    pm = wrap(tiny_model("llama"), ablation="zero")
    set_logits(pm, HAND_HEADS, HAND_MLPS)
    kept = sum(sigmoid(v + BETA * math.log(11.0)) for v in HAND_HEADS.flatten().tolist() + HAND_MLPS.tolist())
    k = round(10 - kept)
    assert k >= 1
    assert _pruned(pm.get_masks()) == _lowest_units(HAND_HEADS, HAND_MLPS, k)


def test_threshold_rule_by_hand():
    pm = wrap(tiny_model("llama"), ablation="zero", binarization="threshold")
    heads = torch.tensor([[10.0, 10.0, 10.0, 10.0], [-10.0, -10.0, 1.0, -0.5]])
    mlps = torch.tensor([-0.2, 2.0])
    set_logits(pm, heads, mlps)

    def rule(values: list[float]) -> list[float]:
        # k = round(sum P(z = 0)) smallest get 0, the rest keep sigmoid(0.8 * log_alpha / beta), then > 0.5.
        k = round(sum(1 - sigmoid(v + BETA * math.log(11.0)) for v in values))
        smallest = set(sorted(range(len(values)), key=lambda i: values[i])[:k])
        soft = [0.0 if i in smallest else sigmoid(0.8 * v / BETA) for i, v in enumerate(values)]
        return [1.0 if s > 0.5 else 0.0 for s in soft]

    expected_heads = torch.tensor(rule(heads.flatten().tolist())).view(LAYERS, HEADS)
    expected_mlps = torch.tensor(rule(mlps.tolist()))
    # By hand: two -10 heads are the expected zeros; -0.5 gives sigmoid(-0.6) < 0.5; 1.0 gives sigmoid(1.2) > 0.5.
    assert expected_heads.tolist() == [[1, 1, 1, 1], [0, 0, 1, 0]]
    assert expected_mlps.tolist() == [0, 1]  # sum P(z=0) = 0.22 + 0.003 -> k = 0; sigmoid(-0.24) < 0.5
    masks = pm.get_masks()
    assert torch.equal(masks["heads"], expected_heads)
    assert torch.equal(masks["mlps"], expected_mlps)
    # get_masks(sparsity=...) still means exact top-k.
    assert int((pm.get_masks(sparsity=0.5)["heads"] == 0).sum() + (pm.get_masks(sparsity=0.5)["mlps"] == 0).sum()) \
        == 5
