"""Arithmetic rows for Subtask Induction, checked against hand-computed values, and the last-token accuracy."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from hf_heuristic_core.induction.arithmetic import (arithmetic_dataset, arithmetic_model, induction_splits, result,
                                                    source_splits, vocab_size)
from hf_heuristic_core.induction.discovery import discover_subnetwork, kept_fraction, subnetwork_accuracy
from hf_heuristic_core.induction.training import labeled_accuracy


def _pairs(rows):
    return set(zip(rows["a"], rows["b"]))


def test_rows_match_hand_computed_values():
    # a=3, b=4, mod 7: T1 = 3 + 12 = 15 -> 1; S1 = 12 -> 5; T2 = 9 + 12 = 21 -> 0. Separator = N = 10.
    assert [result(t, 3, 4, 7) for t in ("t1", "s1", "t2")] == [1, 5, 0]
    rows = arithmetic_dataset("t2", [(3, 4), (6, 6)], num_tokens=10, modulus=7)
    assert rows["input_ids"] == [[3, 4, 10, 0], [6, 6, 10, 2]]        # 36 + 36 = 72 = 70 + 2
    assert rows["labels"] == [[-100, -100, -100, 0], [-100, -100, -100, 2]]
    assert vocab_size(10) == 11


def test_induction_splits_are_diagonal_plus_k_and_disjoint_from_held_out_pairs():
    small, large = induction_splits(5, num_tokens=12, eval_size=20), induction_splits(30, num_tokens=12, eval_size=20)
    diagonal = {(i, i) for i in range(12)}
    assert len(small["train"]) == 12 + 5 and len(large["train"]) == 12 + 30
    assert diagonal <= _pairs(small["train"])
    assert len(_pairs(large["train"]) - diagonal) == 30 and all(a != b for a, b in _pairs(large["test"]))
    train, val, test = (_pairs(large[s]) for s in ("train", "validation", "test"))
    assert len(val) == len(test) == 20 and not (train & val) and not (train & test) and not (val & test)
    # Nested training sets; validation and test do not change with k.
    assert _pairs(small["train"]) < _pairs(large["train"])
    assert small["validation"]["input_ids"] == large["validation"]["input_ids"]
    assert small["test"]["input_ids"] == large["test"]["input_ids"]


def test_source_splits_partition_all_pairs():
    splits = source_splits(num_tokens=10, train_fraction=0.5, seed=1)
    train, test = _pairs(splits["train"]), _pairs(splits["test"])
    assert len(train) == len(test) == 50 and not (train & test) and len(train | test) == 100
    assert all(row[3] == (a + a * b) % 7 for row, a, b in zip(splits["train"]["input_ids"], splits["train"]["a"],
                                                              splits["train"]["b"]))


@pytest.mark.parametrize("call, message", [
    (lambda: induction_splits(1500, num_tokens=40, eval_size=400), "lower k"),
    (lambda: arithmetic_dataset("t1", [(1, 2)], num_tokens=5, modulus=7), "modulus must be <= num_tokens"),
    (lambda: arithmetic_dataset("t3", [(1, 2)], num_tokens=10, modulus=7), "unknown arithmetic task"),
    (lambda: arithmetic_dataset("t1", [(1, 12)], num_tokens=10, modulus=7), r"pairs must hold numbers in \[0, 10\)"),
])
def test_bad_data_requests_are_refused(call, message):
    with pytest.raises(ValueError, match=message):
        call()


class _ProductOracle(nn.Module):
    """Predicts (a * b) mod 7 at the separator, whatever the task: its accuracies can be counted by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(1))

    def forward(self, input_ids):
        logits = torch.zeros(*input_ids.shape, 11)
        logits[torch.arange(len(input_ids)), 2, (input_ids[:, 0] * input_ids[:, 1]) % 7] = self.weight
        return type("Out", (), {"logits": logits})()


def test_labeled_accuracy_scores_only_the_result_token():
    pairs = [(a, b) for a in range(10) for b in range(10)]
    oracle = _ProductOracle()
    assert labeled_accuracy(oracle, arithmetic_dataset("s1", pairs, 10, 7)) == 1.0
    # T1 = a + ab equals ab mod 7 iff a = 0 mod 7: a in {0, 7}, 20 of the 100 pairs.
    assert labeled_accuracy(oracle, arithmetic_dataset("t1", pairs, 10, 7), batch_size=7) == pytest.approx(0.2)
    # Zeroing the oracle's one weight (mask 0) makes every logit 0: argmax picks token 0, right iff ab = 0 mod 7.
    zero_rate = sum((a * b) % 7 == 0 for a, b in pairs) / 100
    assert subnetwork_accuracy(oracle, {"weight": torch.zeros(1)}, arithmetic_dataset("s1", pairs, 10, 7)) == \
        pytest.approx(zero_rate)
    with pytest.raises(ValueError, match="different architectures"):
        subnetwork_accuracy(oracle, {"wte.weight": torch.ones(1)}, arithmetic_dataset("s1", pairs, 10, 7))


def test_discovery_masks_the_embedding_and_leaves_the_source_untouched():
    model = arithmetic_model(num_tokens=8, layers=1, hidden=16, heads=2, inner=32).eval()
    data = arithmetic_dataset("s1", [(a, b) for a in range(8) for b in range(8)], 8, 7)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    masks = discover_subnetwork(model, data, epochs=2, batch_size=32)
    assert set(masks) == {"transformer.wte.weight", "transformer.h.0.attn.c_attn.weight",
                          "transformer.h.0.attn.c_proj.weight", "transformer.h.0.mlp.c_fc.weight",
                          "transformer.h.0.mlp.c_proj.weight"}
    assert all(set(m.unique().tolist()) <= {0.0, 1.0} and m.shape == before[n].shape for n, m in masks.items())
    assert 0 < kept_fraction(masks) < 1
    after = dict(model.named_parameters())
    assert set(after) == set(before) and all(torch.equal(after[n], before[n]) for n in before)
