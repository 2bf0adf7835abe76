"""The synthetic odd-one-out agreement task: every example checked by reading the features back from its tokens."""

from __future__ import annotations

import pytest
import torch

from hf_heuristic_core.data.compositional import (MAX_LENGTH, PAD, SENTENCE_LENGTH, TASKS, TEMPLATES,
                                                  AgreementVocabulary, attention_mask, odd_one_out, sentence_features)

VOCAB = AgreementVocabulary()


def _features(task, n=400, seed=0, nuisance=False):
    ids, labels = odd_one_out(task, n, torch.Generator().manual_seed(seed), nuisance=nuisance)
    sr1, sr2 = sentence_features(ids, VOCAB)
    odd = torch.zeros(n, 4, dtype=torch.bool)
    odd[torch.arange(n), labels] = True
    return ids, labels, sr1, sr2, odd


@pytest.mark.parametrize("nuisance", [False, True])
def test_compositional_rule_followers_are_both_singular_and_the_odd_one_breaks_exactly_one(nuisance):
    ids, labels, sr1, sr2, odd = _features("compositional", nuisance=nuisance)
    assert ids.shape == (400, 4, MAX_LENGTH if nuisance else SENTENCE_LENGTH) and ids.max() < VOCAB.size
    assert bool((sr1 & sr2)[~odd].all())                        # rule-followers: (+SR1, +SR2)
    assert bool((sr1[odd] ^ sr2[odd]).all())                    # odd one: (-, +) or (+, -), never (-, -)
    breaks_sr1 = (~sr1[odd]).float().mean()
    assert 0.4 < float(breaks_sr1) < 0.6                        # both kinds, about equally often
    assert sorted(labels.unique().tolist()) == [0, 1, 2, 3]


@pytest.mark.parametrize("nuisance", [False, True])
@pytest.mark.parametrize("task, target", [("sr1", 0), ("sr2", 1)])
def test_subroutine_tasks_vary_the_other_feature(task, target, nuisance):
    _, _, sr1, sr2, odd = _features(task, nuisance=nuisance)
    own, other = (sr1, sr2) if target == 0 else (sr2, sr1)
    assert bool(own[~odd].all()) and not bool(own[odd].any())  # only the odd one lacks SR_i
    assert 0.4 < float(other[~odd].float().mean()) < 0.6        # the rule-followers' other feature is random
    assert bool(other[odd].all())                               # Lepori's negatives: only SR_i flipped


@pytest.mark.parametrize("nuisance", [False, True])
@pytest.mark.parametrize("task, target", [("odd_sr1", 0), ("odd_sr2", 1)])
def test_test_sets_differ_only_in_one_subroutine(task, target, nuisance):
    _, _, sr1, sr2, odd = _features(task, nuisance=nuisance)
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


def test_varied_layout_varies_template_length_and_positions():
    ids, *_ = _features("compositional", n=2000, nuisance=True)
    sentences = ids.view(-1, MAX_LENGTH)
    mask = attention_mask(sentences)
    lengths = mask.sum(-1)
    assert bool((sentences[:, 0] == 1).all())                                            # [CLS] first
    assert bool((sentences[torch.arange(len(lengths)), lengths - 1] == 2).all())         # [SEP] last real token
    assert bool((sentences[mask == 0] == PAD).all()) and bool((mask.cumprod(-1) == mask).all())   # right-padded
    assert int(lengths.min()) == 5 and int(lengths.max()) == MAX_LENGTH and len(lengths.unique()) == 10
    verbs = torch.isin(sentences, torch.cat([VOCAB.block(2), VOCAB.block(3)]))
    main_verb = torch.where(verbs, torch.arange(MAX_LENGTH), -1).argmax(-1)
    subject = torch.where(torch.isin(sentences, torch.cat([VOCAB.block(0), VOCAB.block(1)])),
                          torch.arange(MAX_LENGTH), MAX_LENGTH).argmin(-1)
    assert set(subject.unique().tolist()) == {2, 3} and len(main_verb.unique()) >= 6     # positions vary
    templates = {"relative": int((sentences == VOCAB.that_id).any(-1).sum()),
                 "two verbs": int((verbs.sum(-1) == 2).sum()),
                 "preposition": int(torch.isin(sentences, VOCAB.preposition_ids).any(-1).sum())}
    assert all(0.15 * len(sentences) < count < 0.6 * len(sentences) for count in templates.values())
    assert len(TEMPLATES) == 4
    # within a problem the four sentences do not share one template: lengths differ in most problems
    assert float((ids != PAD).sum(-1).float().std(-1).gt(0).float().mean()) > 0.9


def test_embedded_verb_agrees_with_the_attractor_not_the_subject():
    ids, *_ = _features("odd_sr2", n=1000, nuisance=True)
    sentences = ids.view(-1, MAX_LENGTH)
    verbs = torch.isin(sentences, torch.cat([VOCAB.block(2), VOCAB.block(3)]))
    two = verbs.sum(-1) == 2
    first_verb = torch.where(verbs, torch.arange(MAX_LENGTH), MAX_LENGTH).argmin(-1)
    embedded = sentences[torch.arange(len(sentences)), first_verb][two]
    attractor = sentences[two][:, :].masked_fill(~torch.isin(sentences[two], torch.cat([VOCAB.block(0),
                                                                                      VOCAB.block(1)])), PAD)
    attractor = attractor.gather(-1, (attractor != PAD).long().cumsum(-1).argmax(-1, keepdim=True)).squeeze(-1)
    assert torch.equal(torch.isin(embedded, VOCAB.block(2)), torch.isin(attractor, VOCAB.block(0)))


def test_bad_arguments():
    with pytest.raises(ValueError, match="Unknown odd-one-out task 'sr3'"):
        odd_one_out("sr3", 4, torch.Generator())
    with pytest.raises(ValueError, match="n >= 1"):
        odd_one_out("sr1", 0, torch.Generator())
    assert set(TASKS) == {"compositional", "sr1", "sr2", "odd_sr1", "odd_sr2"}
