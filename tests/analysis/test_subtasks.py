"""Subtask analyses on synthetic masks against numpy hand computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.analysis.subtasks import (
    clamp_accuracy, invert_masks, lepori_differences, mask_overlap, performance_drop_table, random_ablation_masks,
    remaining_fraction, sharing_fractions, sharing_over_union, specialization_scores, subtask_test)

A = {"l0.weight": np.array([[1, 1, 0], [0, 1, 0]]), "l1.weight": np.array([[1, 0], [0, 0]])}
B = {"l0.weight": np.array([[1, 0, 0], [1, 1, 1]]), "l1.weight": np.array([[0, 1], [0, 0]])}
C = {"l0.weight": np.array([[0, 0, 1], [0, 0, 0]]), "l1.weight": np.array([[0, 0], [0, 1]])}


def _t(masks):
    return {k: torch.tensor(v, dtype=torch.float32) for k, v in masks.items()}


def test_iou_and_iomin_per_layer_by_hand():
    rows = mask_overlap(_t(A), _t(B))
    a, b = A["l0.weight"].astype(bool), B["l0.weight"].astype(bool)
    assert rows["l0.weight"]["iou"] == pytest.approx((a & b).sum() / (a | b).sum())           # 2 / 5
    assert rows["l0.weight"]["iomin"] == pytest.approx((a & b).sum() / min(a.sum(), b.sum()))  # 2 / 3
    assert rows["l1.weight"]["iou"] == 0.0 and rows["l1.weight"]["iomin"] == 0.0
    assert rows["total"]["iou"] == pytest.approx(2 / 7) and rows["total"]["iomin"] == pytest.approx(2 / 4)


def test_sharing_fraction_per_layer_and_total_by_hand():
    shares = sharing_fractions({"A": _t(A), "B": _t(B), "C": _t(C)})
    a, b, c = (m["l0.weight"].astype(bool) for m in (A, B, C))
    assert shares["A"]["l0.weight"] == pytest.approx((a & (b | c)).sum() / a.sum())   # 2 / 3
    assert shares["C"]["l0.weight"] == pytest.approx((c & (a | b)).sum() / c.sum())   # 1 / 1
    # "total" is the per-layer quantity over all layers: shared kept entries / kept entries of the mask itself.
    # A keeps 3 + 1 entries; 2 (layer 0) + 0 (layer 1) of them are kept by B or C.
    assert shares["A"]["total"] == pytest.approx(2 / 4)
    assert shares["C"]["total"] == pytest.approx(0 / 2)
    two = sharing_fractions({"A": _t(A), "B": _t(B)})
    assert two["A"]["total"] == pytest.approx(2 / 4) and two["B"]["total"] == pytest.approx(2 / 5)
    # The number "total" used to be (shared over the union; the IoU for two masks) is sharing_over_union: 2 / 7.
    union = sharing_over_union({"A": _t(A), "B": _t(B)})
    assert union["A"] == pytest.approx(mask_overlap(_t(A), _t(B))["total"]["iou"]) == pytest.approx(2 / 7)
    union0, union1 = (a | b | c).sum(), 3
    assert sharing_over_union({"A": _t(A), "B": _t(B), "C": _t(C)})["A"] == pytest.approx(2 / (union0 + union1))


def test_remaining_fraction_against_the_full_task_mask():
    full = {"l0.weight": np.ones((2, 3)), "l1.weight": np.array([[1, 1], [0, 0]])}
    rows = remaining_fraction(_t(A), _t(full))
    assert rows["l0.weight"] == pytest.approx(3 / 6) and rows["l1.weight"] == pytest.approx(1 / 2)
    assert rows["total"] == pytest.approx(4 / 8)


def test_inversion_and_random_ablation_keep_per_layer_sizes():
    inverted = invert_masks(_t(A))
    assert np.array_equal(inverted["l0.weight"].numpy(), 1 - A["l0.weight"])
    rand = random_ablation_masks(_t(A), torch.Generator().manual_seed(0))
    for kind, mask in A.items():
        assert int((rand[kind] == 0).sum()) == mask.sum()   # as many ablated as the subnetwork keeps
    heads = {"heads": torch.tensor([[1., 1, 0, 0], [1, 0, 0, 0]])}
    rand_heads = random_ablation_masks(heads, torch.Generator().manual_seed(1))["heads"]
    assert (rand_heads == 0).sum(1).tolist() == [2, 1]


def test_lepori_differences_clamp_to_chance_first():
    d_sub, d_abl = lepori_differences(0.95, 0.10, 0.20, 0.80, chance=0.25)
    assert d_sub == pytest.approx(0.95 - 0.25) and d_abl == pytest.approx(0.25 - 0.80)
    assert clamp_accuracy(1.2, 0.25) == 1.0


def test_performance_drop_table_and_scores():
    rows = performance_drop_table({"A": 0.98, "B": 0.96}, {"M_A": {"A": 0.97, "B": 0.01},
                                                            "NOT M_A": {"A": 0.20, "B": 0.94}})
    assert rows[0] == {"mask": "M_A", "acc_A": 0.97, "drop_A": pytest.approx(0.01), "acc_B": 0.01,
                       "drop_B": pytest.approx(0.95)}
    scores = specialization_scores({"A": 0.97, "B": 0.01}, {"A": 0.20, "B": 0.94}, "A", "B")
    assert scores == {"specialization": pytest.approx(0.96), "exclusivity": pytest.approx(0.74)}


def test_subtask_test_on_a_network_with_two_separate_paths():
    """Output 0 reads input 0 only through hidden unit 0; output 1 reads input 1 through hidden unit 1."""
    net = nn.Sequential(nn.Linear(2, 2, bias=False), nn.Linear(2, 2, bias=False))
    with torch.no_grad():
        net[0].weight.copy_(torch.eye(2))
        net[1].weight.copy_(torch.eye(2))
    pm = PrunableModel(net, PruningConfig(granularity="weight"))
    x = torch.tensor([[1.0, 1.0]])

    def works(output):
        return lambda model: float(torch.no_grad()(model)(x)[0, output] != 0)

    mask_a = {"0.weight": torch.tensor([[1., 0], [0, 0]]), "1.weight": torch.tensor([[1., 0], [0, 0]])}
    result = subtask_test(pm, mask_a, works(0), works(1), chance=0.0, random_controls=3)
    assert (result.sub_target, result.sub_other, result.abl_target, result.abl_other) == (1.0, 0.0, 0.0, 1.0)
    assert result.d_sub == 1.0 and result.d_abl == -1.0
    assert len(result.random_d_abl) == 3 and result.to_dict()["evidence"] in (True, False)
    assert not math.isnan(result.to_dict()["random_d_abl_mean"])


def test_subtask_figures_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    from hf_heuristic_core.plotting.subtasks import plot_sharing_bars, plot_subtask_differences
    shares = sharing_fractions({"A": _t(A), "B": _t(B)})
    fig = plot_sharing_bars(shares, path=tmp_path / "sharing")
    assert len(fig.axes[0].patches) == 2 * 3   # two masks x (two layers + total)
    results = [{"d_sub": 0.7, "d_abl": -0.5, "random_d_abl": [0.0, 0.1, -0.1]}, {"d_sub": 0.1, "d_abl": 0.0}]
    plot_subtask_differences(results, ["A", "B"], path=tmp_path / "diff")
    assert (tmp_path / "sharing.png").is_file() and (tmp_path / "diff.pdf").is_file()
