"""Pruning seeds as a dimension of the curve: `EffectiveSizeResults.bands()` (mean and min-max per checkpoint),
`summary_table`'s mean ± half-range, and several seeds through `track_effective_size` and the callback."""

from __future__ import annotations

import pytest
from tiny_models import one_torch_thread  # noqa: F401
from tiny_models import second_token_labels as token_data
from tiny_models import tiny_bert_classifier as tiny_bert
from transformers import Trainer, TrainingArguments

from hf_heuristic_core.batching import PadCollator
from hf_heuristic_core.search import ClimbSchedule
from hf_heuristic_core.search.callback import EffectiveSizeCallback
from hf_heuristic_core.search.tracking import (
    EffectiveSizeResults,
    summary_table,
    track_effective_size,
)

SEARCH = {"strategy": "climb", "sparsities": [0.2, 0.5], "climb": ClimbSchedule(ramp_steps=1, settle_steps=0,
                                                                                max_wait_steps=1),
          "pruning_overrides": {"per_device_train_batch_size": 8}, "means_examples": 16}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def data():
    return {"train": token_data(24, 0), "a": token_data(16, 1), "b": token_data(16, 2)}


def hand_made(tmp_path) -> EffectiveSizeResults:
    settings = {"strategy": "nested", "sparsities": [0.1, 0.5], "seeds": [0, 1, 2], "groups": {"ID": ["id"],
                "OOD": ["o"]}, "margin": 0.03, "steps_per_run": 100}
    entries = [
        {"step": 40, "status": "done", "effective_size": {"ID": 0.5, "OOD": 0.7}, "cost_steps": 300,
         "full_accuracy_by_group": {"ID": 0.9, "OOD": 0.25},
         "effective_size_per_seed": {"ID": {"0": 0.5, "1": 0.5, "2": 0.5}, "OOD": {"0": 0.5, "1": 0.7, "2": 0.9}}},
        {"step": 80, "status": "pending"},
        {"step": 10, "status": "done", "effective_size": {"ID": 0.3, "OOD": 0.9}, "cost_steps": 300,
         "full_accuracy_by_group": {"ID": 0.75, "OOD": 0.5},
         "effective_size_per_seed": {"ID": {"0": 0.1, "1": 0.5, "2": 0.3}, "OOD": {"0": 0.9, "1": 0.9, "2": 0.9}}},
    ]
    return EffectiveSizeResults(tmp_path / "es.json", settings, entries)


def test_bands_give_mean_and_min_max_per_group_in_step_order(tmp_path):
    bands = hand_made(tmp_path).bands()
    assert bands["ID"]["step"] == [10, 40] and bands["ID"]["seeds"] == [3, 3]
    assert bands["ID"]["mean"] == pytest.approx([0.3, 0.5])
    assert bands["ID"]["min"] == [0.1, 0.5] and bands["ID"]["max"] == [0.5, 0.5]
    assert bands["OOD"]["mean"] == pytest.approx([0.9, 0.7])
    assert bands["OOD"]["min"] == [0.9, 0.5] and bands["OOD"]["max"] == [0.9, 0.9]


def test_summary_table_shows_mean_plus_minus_half_the_range(tmp_path):
    lines = summary_table(hand_made(tmp_path)).splitlines()
    assert "ID size" in lines[0] and "OOD full acc" in lines[0]
    assert lines[1].split() == ["10", "0.300", "±", "0.200", "0.900", "±", "0.000", "0.750", "0.500", "300"]
    assert lines[2].split() == ["40", "0.500", "±", "0.000", "0.700", "±", "0.200", "0.900", "0.250", "300"]
    assert lines[3].split() == ["80", "(pending)"]
    assert lines[4] == "size: mean over 3 pruning seeds ± half the min-max range"


def test_summary_table_flags_runs_that_did_not_converge(tmp_path):
    results = hand_made(tmp_path)
    results.entries[40]["converged"] = {"0": {"0.1": True, "0.5": True}, "2": {"0.1": None, "0.5": False}}
    results.entries[10]["converged"] = {"1": {"0.1": False, "0.5": False}}
    last = summary_table(results).splitlines()[-1]
    assert last.startswith("NOT CONVERGED") and last.endswith(": step 10 seed 1; step 40 seed 2")


def test_tracker_with_two_seeds_reports_each_seed_and_the_band(tmp_path, data):
    for step in (5, 10):
        tiny_bert(seed=step).save_pretrained(tmp_path / f"checkpoint-{step}")
    results = track_effective_size(tmp_path, data["train"], {"a": data["a"], "b": data["b"]},
                                   {"A": ["a"], "AB": ["a", "b"]}, seeds=[0, 1], show_progress=False, figure=False,
                                   **SEARCH)
    assert results.settings["seeds"] == [0, 1]
    bands = results.bands()
    for step_index, step in enumerate((5, 10)):
        entry = results.entries[step]
        assert [run["seed"] for run in entry["runs"]] == [0, 1]
        for group in ("A", "AB"):
            per_seed = entry["effective_size_per_seed"][group]
            assert set(per_seed) == {"0", "1"}
            assert bands[group]["mean"][step_index] == pytest.approx(sum(per_seed.values()) / 2)
            assert bands[group]["min"][step_index] == min(per_seed.values())
            assert bands[group]["max"][step_index] == max(per_seed.values())
    assert "± " in summary_table(results)


def test_callback_with_two_seeds_logs_the_band(tmp_path, data):
    callback = EffectiveSizeCallback({"a": data["a"]}, data["train"], seeds=[0, 1], figure=False, **SEARCH)
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=8, learning_rate=1e-3,
                             save_strategy="steps", save_steps=3, report_to="none", use_cpu=True, disable_tqdm=True,
                             seed=0, save_only_model=True)
    trainer = Trainer(model=tiny_bert(), args=args, train_dataset=data["train"], data_collator=PadCollator(0),
                      callbacks=[callback])
    callback.bind(trainer)
    trainer.train()
    logged = [h for h in trainer.state.log_history if "effective_size/all" in h]
    assert len(logged) == 1
    entry = EffectiveSizeResults.load(tmp_path / "effective_size.json").entries[3]
    per_seed = list(entry["effective_size_per_seed"]["all"].values())
    assert len(per_seed) == 2
    assert logged[0]["effective_size_min/all"] == min(per_seed)
    assert logged[0]["effective_size_max/all"] == max(per_seed)
    assert logged[0]["effective_size/all"] == pytest.approx(sum(per_seed) / 2)
