"""The study reports the slim model of its 50% subnetwork: parameters worked out by hand from the run's masks,
latencies of full / hooked / slim, and slim accuracies equal to the hooked ones the study recorded; a slim model that
does not reproduce the hooked subnetwork is reported loudly."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers
from tiny_models import one_torch_thread  # noqa: F401

from hf_heuristic_core.analysis.results import write_json
from hf_heuristic_core.analysis.units import read_masks
from hf_heuristic_core.study.slim_report import (
    choose_run,
    slim_report_for_runs,
    slim_report_lines,
    study_slim_report,
)

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]   # reads the shared tiny study

# The tiny classifier's sizes (tests/study/conftest.py builds it), restated for the by-hand parameter counts.
HIDDEN, HEADS, HEAD_DIM, INTERMEDIATE = 32, 4, 8, 48


@pytest.fixture
def study(tiny_study) -> Path:
    """The shared tiny study (`tests/study/conftest.py`): random 2-layer BERT classifier, sparsity 0.5, seeds 0, 1."""
    return tiny_study


def _expected_slim_parameters(full: int, masks: dict[str, torch.Tensor]) -> int:
    """By hand for BERT under mean ablation: a removed head loses its q/k/v rows (with biases) and its output
    columns; a layer with no head keeps no head (BERT attention runs with zero heads), unless no layer keeps one
    (then each keeps one zero placeholder head, which a stock config can state); a removed MLP block loses the
    intermediate rows (with biases) and the output columns, its output bias (holding the mean) stays."""
    total = full
    placeholder = 0 if bool(masks["heads"].sum() > 0) else 1
    for layer in range(2):
        kept = int(masks["heads"][layer].sum())
        total -= (HEADS - max(kept, placeholder)) * (3 * HEAD_DIM * (HIDDEN + 1) + HEAD_DIM * HIDDEN)
        if masks["mlps"][layer] == 0:
            total -= INTERMEDIATE * (HIDDEN + 1) + INTERMEDIATE * HIDDEN
    return total


def test_study_reports_the_slim_model_of_its_50_percent_run(study):
    slim = json.loads((study / "report.json").read_text())["study"]["slim"]
    assert slim["run"] == "sp50-seed0" and slim["identical"] is True and slim["problems"] == []
    masks = read_masks(study / "runs" / "sp50-seed0")
    assert int(masks["heads"].sum()) + int(masks["mlps"].sum()) < 10   # something was pruned
    full = slim["parameters"]["full"]
    assert full == sum(p.numel() for p in transformers.AutoModelForSequenceClassification.from_pretrained(
        json.loads((study / "report.json").read_text())["study"]["model"]).parameters())
    assert slim["parameters"]["slim"] == _expected_slim_parameters(full, masks) < full
    # per layer, by hand: q/k/v/o 4 x (32 x 32 + 32), two LayerNorms 2 x 64, intermediate 32 x 48 + 48,
    # output 48 x 32 + 32
    assert slim["parameters"]["full_layers"] == 2 * (4 * (32 * 32 + 32) + 2 * 64 + (32 * 48 + 48) + (48 * 32 + 32))
    assert slim["parameters"]["full_layers"] - slim["parameters"]["slim_layers"] == full - slim["parameters"]["slim"]

    recorded = json.loads((study / "runs" / "sp50-seed0" / "result.json").read_text())["eval"]
    assert set(slim["per_set"]) == set(recorded) and len(recorded) == 8   # ID + 7 OOD cases
    for name, entry in slim["per_set"].items():
        assert entry["slim_accuracy"] == entry["hooked_accuracy"] == recorded[name]["accuracy"]
        assert entry["disagreements"] == 0 and entry["max_logit_diff"] <= 1e-4
    ood = [recorded[name]["accuracy"] for name in recorded if name != "id"]
    assert slim["groups"]["slim"]["ood"] == pytest.approx(sum(ood) / len(ood))
    assert slim["groups"]["slim"]["id"] == recorded["id"]["accuracy"]
    assert all(seconds > 0 for seconds in slim["latency_s"].values())
    assert slim["latency_setting"]["threads"] == 1 and slim["latency_setting"]["batch"][0] == 32

    report = (study / "report.md").read_text()
    assert "## Slim model of one 50% subnetwork" in report
    assert f"| parameters | {full:,} | {full:,} (+ masks) | {slim['parameters']['slim']:,} " in report
    assert f"| parameters of the transformer layers | 15,008 | 15,008 | {slim['parameters']['slim_layers']:,} (" \
        in report
    assert "CPU, 1 thread" in report and "predict the same class on all 61 evaluation examples" in report
    timings = json.loads((study / "report.json").read_text())["study"]["timings_s"]
    assert timings["slim_report"] < 30

    # The same report from the finished study's runs folder alone (its manifest names the model and the data).
    again = slim_report_for_runs(study / "runs", repeats=1, min_seconds=0)
    assert again["per_set"] == slim["per_set"] and again["groups"] == slim["groups"]
    assert again["parameters"] == slim["parameters"] and again["identical"] is True


def test_a_slim_model_that_differs_is_reported_loudly(study, monkeypatch):
    from hf_heuristic_core import PrunableModel
    original = PrunableModel.export_slim

    def broken(self, *args, **kwargs):
        slim = original(self, *args, **kwargs)
        with torch.no_grad():
            slim.classifier.bias.add_(torch.tensor([5.0, -5.0]))   # a wrong fold would look like this
        return slim

    monkeypatch.setattr(PrunableModel, "export_slim", broken)
    result = slim_report_for_runs(study / "runs", repeats=1, min_seconds=0)
    assert result["identical"] is False
    assert any("logits differ by up to" in problem for problem in result["problems"])
    text = "\n".join(slim_report_lines(result))
    assert "**WARNING: THE SLIM MODEL DOES NOT REPRODUCE THE HOOKED SUBNETWORK.**" in text


def test_choose_run_prefers_the_nearest_sparsity_then_the_lowest_seed(tmp_path):
    assert choose_run(tmp_path) is None
    assert study_slim_report("unused", tmp_path, {"id": None}, {"id": ["id"]}) == {
        "skipped": f"no finished pruning run under {tmp_path}"}
    for name, sparsity, seed in (("sp70-seed0", 0.7, 0), ("sp50-seed2", 0.5, 2), ("sp50-seed1", 0.5, 1),
                                 ("sp40-seed0", 0.4, 0)):
        (tmp_path / name).mkdir()
        write_json(tmp_path / name / "result.json", {"sparsity": sparsity, "seed": seed})
    assert choose_run(tmp_path).name == "sp50-seed1"
    assert choose_run(tmp_path, sparsity=0.65).name == "sp70-seed0"
    assert slim_report_lines({"skipped": "no SlimMap"}) == ["## Slim model of one 50% subnetwork", "",
                                                            "Not exported: no SlimMap", ""]


def test_accuracies_are_computed_exactly_as_the_studys_evaluation():
    """correct / count as evaluate_subnetwork computes it (a float32 mean of 1/3 would differ from it)."""
    from tiny_models import make_batch, tiny_model

    from hf_heuristic_core import PrunableModel, PruningConfig
    from hf_heuristic_core.evaluation.subnetwork import evaluate_subnetwork
    from hf_heuristic_core.study.slim_report import _compare
    prunable = PrunableModel(tiny_model("bert"), PruningConfig(ablation="zero"))
    prunable.set_masks(heads=torch.tensor([[1., 0, 1, 1], [0, 1, 1, 0]]), mlps=torch.tensor([1., 0]))
    prunable.eval()
    batch = make_batch("bert", batch_size=3)
    with torch.no_grad():
        predicted = prunable(**batch).logits.argmax(-1)
    labels = predicted.clone()
    labels[1:] = (predicted[1:] + 1) % 3                       # one of three right
    data = [dict(batch, labels=labels)]
    entry = _compare(prunable, prunable.export_slim(), data, None, 32, torch.device("cpu"))
    assert entry["hooked_accuracy"] == entry["slim_accuracy"] == 1 / 3
    assert entry["hooked_accuracy"] == evaluate_subnetwork(prunable, {"x": data})["x"]["accuracy"]
