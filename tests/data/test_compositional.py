"""The synthetic odd-one-out agreement task: every example checked by reading the features back from its tokens."""

from __future__ import annotations

import pytest
import torch

from hf_heuristic_core.data.compositional import (SENTENCE_LENGTH, TASKS, AgreementVocabulary, odd_one_out,
                                                  sentence_features)

VOCAB = AgreementVocabulary()


def _features(task, n=400, seed=0):
    ids, labels = odd_one_out(task, n, torch.Generator().manual_seed(seed))
    sr1, sr2 = sentence_features(ids, VOCAB)
    odd = torch.zeros(n, 4, dtype=torch.bool)
    odd[torch.arange(n), labels] = True
    return ids, labels, sr1, sr2, odd


def test_compositional_rule_followers_are_both_singular_and_the_odd_one_breaks_exactly_one():
    ids, labels, sr1, sr2, odd = _features("compositional")
    assert ids.shape == (400, 4, SENTENCE_LENGTH) and ids.max() < VOCAB.size
    assert bool((sr1 & sr2)[~odd].all())                        # rule-followers: (+SR1, +SR2)
    assert bool((sr1[odd] ^ sr2[odd]).all())                    # odd one: (-, +) or (+, -), never (-, -)
    breaks_sr1 = (~sr1[odd]).float().mean()
    assert 0.4 < float(breaks_sr1) < 0.6                        # both kinds, about equally often
    assert sorted(labels.unique().tolist()) == [0, 1, 2, 3]


@pytest.mark.parametrize("task, target", [("sr1", 0), ("sr2", 1)])
def test_subroutine_tasks_vary_the_other_feature(task, target):
    _, _, sr1, sr2, odd = _features(task)
    own, other = (sr1, sr2) if target == 0 else (sr2, sr1)
    assert bool(own[~odd].all()) and not bool(own[odd].any())  # only the odd one lacks SR_i
    assert 0.4 < float(other.float().mean()) < 0.6              # the other feature is random everywhere


@pytest.mark.parametrize("task, target", [("odd_sr1", 0), ("odd_sr2", 1)])
def test_test_sets_differ_only_in_one_subroutine(task, target):
    _, _, sr1, sr2, odd = _features(task)
    own, other = (sr1, sr2) if target == 0 else (sr2, sr1)
    assert bool(other.all())                                    # the other feature is + everywhere
    assert bool(own[~odd].all()) and not bool(own[odd].any())


def test_layout_and_attractor():
    ids, *_ = _features("compositional", n=2000)
    assert bool((ids[..., 0] == 1).all()) and bool((ids[..., -1] == 2).all())           # [CLS] ... [SEP]
    nouns = torch.cat([VOCAB.block(0), VOCAB.block(1)])
    attractor_singular = torch.isin(ids[..., 3], VOCAB.block(0)).float().mean()
    assert bool(torch.isin(ids[..., 3], nouns).all()) and 0.45 < float(attractor_singular) < 0.55
    assert torch.equal(odd_one_out("sr1", 5, torch.Generator().manual_seed(3))[0],
                       odd_one_out("sr1", 5, torch.Generator().manual_seed(3))[0])       # seeded


def test_bad_arguments():
    with pytest.raises(ValueError, match="Unknown odd-one-out task 'sr3'"):
        odd_one_out("sr3", 4, torch.Generator())
    with pytest.raises(ValueError, match="n >= 1"):
        odd_one_out("sr1", 0, torch.Generator())
    assert set(TASKS) == {"compositional", "sr1", "sr2", "odd_sr1", "odd_sr2"}
