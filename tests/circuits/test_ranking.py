"""MIB's circuit sizes (int(p * n), counted by hand) and the units a circuit of a size keeps."""

from __future__ import annotations

import pytest
import torch

from hf_heuristic_core.circuits.ranking import (
    MIB_CURVE_SIZES,
    MIB_SUBMISSION_SIZES,
    circuit_size,
    random_scores,
    scored_count,
    size_label,
    top_units,
)


def test_sizes_are_mibs():
    assert MIB_CURVE_SIZES == (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)
    assert MIB_SUBMISSION_SIZES == (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
    assert [size_label(s) for s in MIB_CURVE_SIZES[:3]] == ["0.1%", "0.2%", "0.5%"]


@pytest.mark.parametrize("n, expected", [
    (78, [0, 0, 0, 0, 1, 3, 7, 15, 39, 78]),          # MiniLM: 72 heads + 6 MLP blocks
    (300, [0, 0, 1, 3, 6, 15, 30, 60, 150, 300]),     # SmolLM2-135M: 270 query heads + 30 MLP blocks
    (156, [0, 0, 0, 1, 3, 7, 15, 31, 78, 156]),       # GPT-2 small: 144 heads + 12 MLP blocks
])
def test_circuit_sizes_round_down_like_mib(n, expected):
    assert [circuit_size(p, n) for p in MIB_CURVE_SIZES] == expected
    with pytest.raises(ValueError, match="fraction"):
        circuit_size(5.0, n)


def test_top_units_keeps_the_highest_scores_and_every_unscored_unit():
    scores = {"heads": torch.tensor([[0.5, -2.0, 3.0], [1.0, float("nan"), 0.1]]), "mlps": torch.tensor([2.0, -0.5])}
    assert scored_count(scores) == 7
    masks = top_units(scores, 2)
    assert masks["heads"].tolist() == [[0, 0, 1], [0, 1, 0]]   # 3.0, and the unscored head
    assert masks["mlps"].tolist() == [1, 0]                    # 2.0
    masks = top_units(scores, 2, absolute=True)                # |-2.0| now ranks second
    assert masks["heads"].tolist() == [[0, 1, 1], [0, 1, 0]]
    assert masks["mlps"].tolist() == [0, 0]
    none = top_units(scores, 0)
    assert int(none["heads"].sum() + none["mlps"].sum()) == 1   # only the unscored head
    with pytest.raises(ValueError, match="7 units have a score"):
        top_units(scores, 8)


def test_ties_follow_mibs_node_order():
    # MIB's order: a0.h0, a0.h1, m0, a1.h0, a1.h1, m1. All tied: the first ones in that order win.
    scores = {"heads": torch.zeros(2, 2), "mlps": torch.zeros(2)}
    masks = top_units(scores, 3)
    assert masks["heads"].tolist() == [[1, 1], [0, 0]] and masks["mlps"].tolist() == [1, 0]


def test_random_scores_are_seeded():
    a = random_scores({"heads": (2, 3), "mlps": (2,)}, seed=4)
    b = random_scores({"heads": (2, 3), "mlps": (2,)}, seed=4)
    c = random_scores({"heads": (2, 3), "mlps": (2,)}, seed=5)
    assert torch.equal(a["heads"], b["heads"]) and not torch.equal(a["heads"], c["heads"])
