"""The search's exact early stopping on a tiny random BERT: the same effective sizes (per seed and group) as
evaluating every level, from the same masks (every level still learned), fewer or equal evaluations, the full model's
logits computed once and shared, and per (seed, level) the convergence verdict of the run behind the masks."""

from __future__ import annotations

import json

import pytest
from tiny_models import one_torch_thread  # noqa: F401
from tiny_models import second_token_labels as token_data
from tiny_models import tiny_bert_classifier as tiny_bert

import hf_heuristic_core.search.evaluate as search_evaluate
from hf_heuristic_core.search import EffectiveSizeSearch, search_effective_size

FAST = {"per_device_train_batch_size": 8}
LEVELS = [0.1, 0.3, 0.5, 0.7]
GROUPS = {"A": ["a"], "B": ["b"], "AB": ["a", "b"]}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def data():
    return {"train": token_data(48, 0), "a": token_data(24, 1), "b": token_data(24, 2)}


def search(data, **kwargs):
    return search_effective_size(tiny_bert(), data["train"], {"a": data["a"], "b": data["b"]}, GROUPS,
                                 strategy="nested", sparsities=LEVELS, seeds=[0, 1], steps_per_run=4,
                                 **{"pruning_overrides": FAST, **kwargs})


@pytest.mark.parametrize("margin", [0.0, 0.05, 0.2])
def test_early_stopping_gives_the_full_evaluations_effective_sizes_from_the_same_masks(data, margin):
    full = search(data, margin=margin, early_stopping=False)
    early = search(data, margin=margin)
    assert early.early_stopping and not full.early_stopping
    assert early.masks == full.masks                       # every level's masks are still learned
    assert early.effective_size_per_seed == full.effective_size_per_seed
    assert early.effective_size == full.effective_size and early.full_accuracy == full.full_accuracy
    assert full.evaluation_count() == 2 * len(LEVELS) * 2
    assert early.evaluation_count() <= full.evaluation_count()
    for seed, table in early.pruned_accuracy.items():
        for level, row in table.items():
            assert sorted(row) == early.evaluated[seed][level]
            for case, accuracy in row.items():              # what was evaluated is what the full run measured
                assert accuracy == full.pruned_accuracy[seed][level][case]
                assert early.evaluations[seed][level][case] == full.evaluations[seed][level][case]
    # Only pairs the scans may need: a level is evaluated only on sets of the groups whose scan reached it (a group
    # with effective size e stops at sparsity 1 - e; one with nothing faithful, e = 1, scans every level), and
    # every reached level was looked at.
    for seed in (0, 1):
        for level in LEVELS:
            reached = [g for g in GROUPS if early.effective_size_per_seed[g][seed] == 1.0
                       or level >= 1.0 - early.effective_size_per_seed[g][seed] - 1e-9]
            allowed = {case for g in reached for case in GROUPS[g]}
            assert set(early.evaluated[seed].get(level, [])) <= allowed
            assert bool(early.evaluated[seed].get(level)) == bool(reached)


def test_when_the_answer_needs_no_evaluation_none_runs(data):
    early = search(data, margin=1.0)   # threshold below 0: any subnetwork is faithful, whatever it scores
    assert early.evaluated == {0: {}, 1: {}} and early.evaluation_count() == 0 and early.pruned_accuracy == {0: {}, 1: {}}
    assert all(v == pytest.approx(0.3) for v in early.effective_size.values())
    assert set(early.masks[0]) == set(LEVELS)
    full = search(data, margin=1.0, early_stopping=False)
    assert full.effective_size_per_seed == early.effective_size_per_seed and full.evaluation_count() == 16


def test_the_full_model_is_evaluated_once_and_its_logits_shared(data, monkeypatch):
    real = search_evaluate.evaluate_subnetwork
    caches = []

    def spy(model, eval_sets, masks=None, **kwargs):
        caches.append(set(kwargs["full_model_cache"]))
        assert masks is not None   # every call from the scan evaluates a pruned subnetwork
        return real(model, eval_sets, masks, **kwargs)
    monkeypatch.setattr(search_evaluate, "evaluate_subnetwork", spy)
    search(data, margin=0.05, early_stopping=False)
    assert caches and all(cache == {"a", "b"} for cache in caches)   # filled before the first subnetwork


def test_each_level_records_whether_its_pruning_run_converged(data):
    grid = search_effective_size(tiny_bert(), data["train"], {"a": data["a"]}, strategy="grid",
                                 sparsities=[0.3, 0.5], steps_per_run=3, pruning_overrides=FAST)
    verdicts = {run["sparsity"]: run["convergence"]["converged"] for run in grid.runs}
    assert grid.converged == {0: verdicts} and all(isinstance(v, bool) for v in verdicts.values())
    nested = search(data, margin=0.05)
    for run in nested.runs:    # one run per seed: its verdict holds for every level it produced
        assert {"converged", "verdict", "kl", "random_kl_median"} <= set(run["convergence"])
        assert nested.converged[run["seed"]] == dict.fromkeys(LEVELS, run["convergence"]["converged"])
    unchecked = search(data, margin=0.05, pruning_overrides={**FAST, "convergence_check": False})
    assert unchecked.converged == {0: dict.fromkeys(LEVELS), 1: dict.fromkeys(LEVELS)}
    again = EffectiveSizeSearch.from_dict(json.loads(json.dumps(nested.to_dict())))
    assert again.converged == nested.converged and again.evaluated == nested.evaluated
