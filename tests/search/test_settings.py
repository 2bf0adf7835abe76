"""`SearchSettings` (one validated dataclass behind every door of the search) and the strategy registry: a strategy
defined in this test plugs into `search_effective_size` and the tracker's settings with one registration."""

from __future__ import annotations

import pytest
import torch
from tiny_models import one_torch_thread  # noqa: F401
from tiny_models import second_token_labels as token_data
from tiny_models import tiny_bert_classifier as tiny_bert

from hf_heuristic_core import EffectiveSizeError
from hf_heuristic_core.search import (
    SEARCH_STRATEGIES,
    STRATEGIES,
    ClimbSchedule,
    SearchSettings,
    SearchStrategy,
    get_strategy,
    register_strategy,
    search_effective_size,
)
from hf_heuristic_core.search.tracking import search_settings

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_defaults_and_block():
    settings = SearchSettings(sparsities=[0.5, 0.1], seeds=(2, 0)).resolve(["id", "ood"])
    assert settings.strategy == "nested" and settings.steps_per_run == 100 and settings.sparsities == [0.1, 0.5]
    assert settings.groups == {"all": ["id", "ood"]} and settings.early_stopping is True
    assert settings.block() == {"strategy": "nested", "sparsities": [0.1, 0.5], "seeds": [2, 0],
                                "groups": {"all": ["id", "ood"]}, "margin": 0.03, "steps_per_run": 100,
                                "early_stopping": True}
    assert SearchSettings(strategy="grid").steps_per_run == 200
    climb = SearchSettings(strategy="climb", climb=ClimbSchedule(ramp_steps=3)).resolve(["a"]).block()
    assert "steps_per_run" not in climb and climb["climb"]["ramp_steps"] == 3
    # the tracker's settings block is the same object's block
    assert search_settings("grid", [0.2], [0], None, 0.05, cases=["a"]) == \
        SearchSettings("grid", [0.2], [0], margin=0.05).resolve(["a"]).block()


@pytest.mark.parametrize("kwargs, message", [
    ({"strategy": "random"}, r"strategy must be one of \('grid', 'climb', 'nested'"),
    ({"sparsities": [50]}, "pass fractions"),
    ({"seeds": [0, 0]}, "seeds lists a seed twice"),
    ({"seeds": "0,1"}, "list of integers"),
    ({"margin": -0.1}, "margin must be a finite number >= 0"),
    ({"margin": float("nan")}, "margin must be a finite number >= 0"),
    ({"strategy": "grid", "steps_per_run": 0}, "steps_per_run must be a positive integer"),
    ({"early_stopping": "yes"}, "early_stopping must be True or False"),
    ({"climb": {"ramp_steps": 3}}, "climb must be a ClimbSchedule"),
])
def test_bad_settings_name_the_problem(kwargs, message):
    with pytest.raises(EffectiveSizeError, match=message):
        SearchSettings(**kwargs)


def test_groups_are_checked_against_the_evaluation_sets():
    with pytest.raises(EffectiveSizeError, match=r"names \['c'\], which are not evaluation sets"):
        SearchSettings(groups={"ID": ["c"]}).resolve(["a", "b"])


class FirstUnits(SearchStrategy):
    """A toy strategy: no training; each level prunes the first round(level * units) units (heads, then MLPs)."""

    name = "first-units-test"
    default_steps = 1

    def learn(self, runner, levels, seed, settings):
        prunable = runner.prunable
        units = prunable.num_units()
        masks = {}
        for level in levels:
            heads, mlps = torch.ones(prunable.num_layers, prunable.num_heads), torch.ones(prunable.num_layers)
            for index in range(round(level * units)):
                if index < heads.numel():
                    heads.view(-1)[index] = 0.0
                else:
                    mlps[index - heads.numel()] = 0.0
            masks[level] = {"heads": heads, "mlps": mlps}
        return masks, [{"strategy": self.name, "seed": seed, "steps": 0, "convergence": None}]


def test_a_strategy_registered_from_outside_runs_through_the_search():
    register_strategy(FirstUnits())
    try:
        assert get_strategy("first-units-test").name == "first-units-test"
        data = {"train": token_data(16, 0), "a": token_data(16, 1)}
        result = search_effective_size(tiny_bert(), data["train"], {"a": data["a"]}, strategy="first-units-test",
                                       sparsities=[0.2, 0.5], early_stopping=False)
        assert result.strategy == "first-units-test" and result.cost_steps == 0
        assert result.masks[0][0.2]["heads"] == [[0.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 1.0]]
        assert result.masks[0][0.5]["heads"] == [[0.0, 0.0, 0.0, 0.0], [0.0, 1.0, 1.0, 1.0]]
        assert result.converged == {0: {0.2: None, 0.5: None}}
        assert search_settings("first-units-test", [0.2], cases=["a"])["steps_per_run"] == 1
    finally:
        del STRATEGIES["first-units-test"]
    assert SEARCH_STRATEGIES == ("grid", "climb", "nested")
    with pytest.raises(TypeError, match="SearchStrategy instance"):
        register_strategy(FirstUnits)
