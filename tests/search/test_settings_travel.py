"""Settings travel whole: `search_effective_size` takes `SearchSettings`, `EvaluationOptions` and `PruningSetup`
objects end to end; the old keyword form fills in the same objects (`search_inputs`) and gives the same search."""

from __future__ import annotations

import inspect

import pytest

from hf_heuristic_core import EffectiveSizeError, PruningConfig
from hf_heuristic_core.evaluation.options import EvaluationOptions
from hf_heuristic_core.search import ClimbSchedule, SearchSettings, search_effective_size
from hf_heuristic_core.search.run import search_inputs
from hf_heuristic_core.search.strategies import SHORT_RUN_ARGUMENTS, search_pruning_arguments
from hf_heuristic_core.training.setup import PruningSetup
from tiny_models import one_torch_thread  # noqa: F401
from tiny_models import second_token_labels as token_data, tiny_bert_classifier as tiny_bert

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_old_keywords_fill_in_the_same_objects():
    collate = object()
    config = PruningConfig(init_mean=3.0)
    settings, evaluation, pruning = search_inputs(None, None, None, {"A": ["a"]}, {
        "strategy": "grid", "sparsities": [0.5, 0.2], "seeds": [1], "steps_per_run": 4, "margin": 0.05,
        "early_stopping": False, "pruning_config": config, "pruning_overrides": {"keep_dropout": True},
        "means_examples": 16, "eval_batch_size": 4, "collate_fn": collate, "entailment_id": 2,
        "collapse_to_entailment": False, "show_progress": True})
    assert settings == SearchSettings(strategy="grid", sparsities=[0.2, 0.5], seeds=[1], groups={"A": ["a"]},
                                      margin=0.05, steps_per_run=4, early_stopping=False)
    assert evaluation == EvaluationOptions(batch_size=4, collate_fn=collate, collapse_to_entailment=False,
                                           entailment_id=2)
    assert pruning == PruningSetup(config=config, overrides={"keep_dropout": True}, means_examples=16,
                                   show_progress=True)
    # Defaults: the old function's defaults.
    settings, evaluation, pruning = search_inputs(None, None, None, None, {})
    assert settings == SearchSettings() and settings.climb == ClimbSchedule()
    assert evaluation == EvaluationOptions(batch_size=32, collapse_to_entailment="auto", entailment_id=0)
    assert pruning == PruningSetup(config=None, overrides={}, means_examples=512, show_progress=False)


def test_an_object_and_its_keywords_together_are_refused():
    with pytest.raises(EffectiveSizeError, match=r"got settings= and \['seeds', 'strategy'\]; put them into the "
                                                 r"settings object"):
        search_inputs(SearchSettings(), None, None, None, {"strategy": "grid", "seeds": [0]})
    with pytest.raises(EffectiveSizeError, match=r"got pruning= and \['pruning_overrides'\]"):
        search_inputs(None, None, PruningSetup(), None, {"pruning_overrides": {}})
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['strateggy'\]"):
        search_inputs(None, None, None, None, {"strateggy": "grid"})
    with pytest.raises(EffectiveSizeError, match="settings must be a SearchSettings, got dict"):
        search_inputs({"strategy": "grid"}, None, None, None, {})


def test_groups_given_beside_settings_are_used_not_dropped():
    settings, _, _ = search_inputs(SearchSettings(strategy="grid"), None, None, {"A": ["a"]}, {})
    assert settings.groups == {"A": ["a"]} and settings.strategy == "grid"


def test_the_target_sparsity_reaches_pruning_arguments_typed_and_cannot_be_overridden(tmp_path):
    args = search_pruning_arguments(str(tmp_path), 0.4, 7, 3, {"max_steps": 9, "keep_dropout": True},
                                    sparsity_warmup_steps=2)
    assert (args.target_sparsity, args.seed, args.output_dir) == (0.4, 3, str(tmp_path))
    assert (args.max_steps, args.keep_dropout, args.sparsity_warmup_steps) == (9, True, 2)   # overrides win
    assert args.recipe == SHORT_RUN_ARGUMENTS["recipe"]
    for name, value in (("target_sparsity", 0.9), ("seed", 1), ("output_dir", "elsewhere")):
        with pytest.raises(ValueError, match=rf"pruning_overrides may not set \['{name}'\]: they are set per run"):
            search_pruning_arguments(str(tmp_path), 0.4, 7, 3, {name: value})


def test_objects_and_keywords_give_the_same_search():
    data = {"train": token_data(32, 0), "a": token_data(16, 1)}
    common = dict(model_or_path=None, train_dataset=data["train"], eval_sets={"a": data["a"]})
    by_keywords = search_effective_size(**{**common, "model_or_path": tiny_bert()}, strategy="grid",
                                        sparsities=[0.2, 0.4], steps_per_run=2,
                                        pruning_overrides={"per_device_train_batch_size": 8}, eval_batch_size=8)
    by_objects = search_effective_size(
        **{**common, "model_or_path": tiny_bert()},
        settings=SearchSettings(strategy="grid", sparsities=[0.2, 0.4], steps_per_run=2),
        evaluation=EvaluationOptions(batch_size=8), pruning=PruningSetup(overrides={"per_device_train_batch_size": 8}))
    assert by_objects.masks == by_keywords.masks
    assert by_objects.pruned_accuracy == by_keywords.pruned_accuracy
    assert by_objects.effective_size == by_keywords.effective_size
    assert by_objects.cost_steps == by_keywords.cost_steps == 4


def test_search_effective_size_takes_at_most_ten_parameters():
    assert len(inspect.signature(search_effective_size).parameters) <= 10
