"""`track_effective_size` over checkpoint folders: step order, incremental crash-safe JSON, resuming after an
interruption (only the remaining checkpoints are computed), the figure, bad input, and the CLI subcommand."""

from __future__ import annotations

import json

import pytest
import transformers

import hf_heuristic_core.search.tracking as tracking
from hf_heuristic_core import EffectiveSizeError
from hf_heuristic_core.cli.effective_size import effective_size_command
from hf_heuristic_core.search import ClimbSchedule
from hf_heuristic_core.search.tracking import EffectiveSizeResults, find_checkpoints, track_effective_size
from tiny_models import one_torch_thread, second_token_labels as token_data, tiny_bert_classifier as tiny_bert  # noqa: F401

SEARCH = {"strategy": "climb", "sparsities": [0.2, 0.5], "climb": ClimbSchedule(ramp_steps=1, settle_steps=0, max_wait_steps=1),
          "pruning_overrides": {"per_device_train_batch_size": 8}, "means_examples": 16}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def data():
    return {"train": token_data(24, 0), "a": token_data(16, 1), "b": token_data(16, 2)}


@pytest.fixture
def run_dir(tmp_path):
    """A fine-tuning output dir: checkpoints at steps 5, 10 and 40 (name order would be 10, 40, 5)."""
    for step in (5, 10, 40):
        tiny_bert(seed=step).save_pretrained(tmp_path / f"checkpoint-{step}")
    (tmp_path / "runs").mkdir()
    (tmp_path / "checkpoint-best").mkdir()
    return tmp_path


@pytest.fixture
def spy(monkeypatch):
    """Records which checkpoints the tracker searches; `spy.fail_on` makes the n-th call crash."""
    real = tracking.search_effective_size
    calls: list[str] = []

    def searched(path, *args, **kwargs):
        calls.append(path.name)
        if spy.fail_on == len(calls):
            raise RuntimeError("simulated crash")
        return real(path, *args, **kwargs)

    class Spy:
        fail_on = None
    spy = Spy()
    spy.calls = calls
    monkeypatch.setattr(tracking, "search_effective_size", searched)
    return spy


def track(run_dir, data, **kwargs):
    return track_effective_size(run_dir, data["train"], {"a": data["a"], "b": data["b"]},
                                {"A": ["a"], "AB": ["a", "b"]}, show_progress=False, **{**SEARCH, **kwargs})


def test_checkpoints_are_found_in_step_order(run_dir):
    assert [(step, path.name) for step, path in find_checkpoints(run_dir)] == [
        (5, "checkpoint-5"), (10, "checkpoint-10"), (40, "checkpoint-40")]


def test_tracker_resumes_and_computes_only_the_remaining_checkpoints(run_dir, data, spy):
    first = track(run_dir, data, max_checkpoints=1)
    assert spy.calls == ["checkpoint-5"]
    saved = json.loads((run_dir / "effective_size.json").read_text())
    assert [(e["step"], e["status"]) for e in saved["checkpoints"]] == [(5, "done")]
    assert saved["settings"]["groups"] == {"A": ["a"], "AB": ["a", "b"]}
    entry_before = saved["checkpoints"][0]

    second = track(run_dir, data)
    assert spy.calls == ["checkpoint-5", "checkpoint-10", "checkpoint-40"]
    saved = json.loads((run_dir / "effective_size.json").read_text())
    assert [(e["step"], e["checkpoint"], e["status"]) for e in saved["checkpoints"]] == [
        (5, "checkpoint-5", "done"), (10, "checkpoint-10", "done"), (40, "checkpoint-40", "done")]
    assert saved["checkpoints"][0] == entry_before
    assert first.done_steps() == {5} and second.done_steps() == {5, 10, 40}
    for entry in saved["checkpoints"]:
        assert set(entry["effective_size"]) == {"A", "AB"} and entry["cost_steps"] > 0
        assert set(entry["masks"]["0"]) == {"0.2", "0.5"}   # every level learned
        assert set(entry["pruned_accuracy"]["0"]) == set(entry["evaluated"]["0"]) <= {"0.2", "0.5"}
    rows = second.records()
    assert len(rows) == 6 and {r["group"] for r in rows} == {"A", "AB"}
    assert (run_dir / "effective_size.png").is_file() and (run_dir / "effective_size.pdf").is_file()

    track(run_dir, data)               # nothing left to do
    assert len(spy.calls) == 3


def test_tracker_resumes_after_a_crash_without_a_damaged_file(run_dir, data, spy):
    spy.fail_on = 2
    with pytest.raises(RuntimeError, match="simulated crash"):
        track(run_dir, data, figure=False)
    saved = json.loads((run_dir / "effective_size.json").read_text())
    assert [e["step"] for e in saved["checkpoints"]] == [5]
    assert not [p for p in run_dir.iterdir() if p.name.endswith(".tmp")]
    spy.fail_on = None
    track(run_dir, data, figure=False)
    assert spy.calls == ["checkpoint-5", "checkpoint-10", "checkpoint-10", "checkpoint-40"]


def test_pending_checkpoints_recorded_by_the_callback_are_computed(run_dir, data, tmp_path_factory):
    elsewhere = tmp_path_factory.mktemp("moved") / "checkpoint-7"
    tiny_bert(seed=7).save_pretrained(elsewhere)
    results = EffectiveSizeResults(run_dir / "effective_size.json")
    results.record_pending(7, elsewhere)
    results.record_pending(99, run_dir / "checkpoint-99")   # deleted by save_total_limit: skipped with a warning
    results.save()
    done = track(run_dir, data, max_checkpoints=2, figure=False)
    assert done.done_steps() == {5, 7}
    assert done.entries[7]["checkpoint"] == str(elsewhere.resolve())
    assert done.entries[99]["status"] == "pending"


def test_no_checkpoints_is_a_clear_error(tmp_path, data):
    with pytest.raises(EffectiveSizeError, match="no checkpoint-\\* folders"):
        track(tmp_path, data)
    with pytest.raises(EffectiveSizeError, match="is not a folder"):
        track(tmp_path / "missing", data)


def test_a_checkpoint_of_another_architecture_is_refused_before_any_work(run_dir, data, spy):
    tiny_bert(layers=3).save_pretrained(run_dir / "checkpoint-20")
    with pytest.raises(EffectiveSizeError, match=r"checkpoint-20 is a bert .* 3 layers .* checkpoint-5 is a bert"):
        track(run_dir, data)
    assert spy.calls == []


def test_resuming_with_other_settings_or_a_corrupt_file_is_refused(run_dir, data):
    track(run_dir, data, max_checkpoints=1, figure=False)
    with pytest.raises(EffectiveSizeError, match="other settings.*margin"):
        track(run_dir, data, margin=0.05)
    with pytest.raises(EffectiveSizeError, match="other settings.*groups"):
        track_effective_size(run_dir, data["train"], {"a": data["a"], "b": data["b"]}, {"A": ["a"]}, **SEARCH)
    with pytest.raises(EffectiveSizeError, match="outside"):
        track(run_dir, data, sparsities=[0.2, 2.0])
    (run_dir / "effective_size.json").write_text("{not json")
    with pytest.raises(EffectiveSizeError, match="not valid JSON"):
        track(run_dir, data)


def test_cli_on_generated_data(tmp_path, minilm_dir, capsys):
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    for step in (4, 8):
        tiny_bert(seed=step, vocab=tokenizer.vocab_size, num_labels=2).save_pretrained(tmp_path / f"checkpoint-{step}")
        tokenizer.save_pretrained(tmp_path / f"checkpoint-{step}")
    flags = [
        "--train_data", "generated", "--id_eval", "generated", "--ood_eval", "generated",
        "--generated_train_size", "32", "--generated_id_size", "16", "--generated_ood_size", "4",
        "--sparsities", "0.2,0.5", "--ramp_steps", "1", "--settle_steps", "0", "--max_wait_steps", "1",
        "--batch_size", "8", "--means_examples", "16", "--max_length", "24"]
    assert effective_size_command([str(tmp_path), *flags, "--max_checkpoints", "1"]) == 0
    assert effective_size_command([str(tmp_path), *flags]) == 0
    printed = capsys.readouterr().out
    saved = json.loads((tmp_path / "effective_size.json").read_text())
    groups = saved["settings"]["groups"]
    assert groups["ID"] == ["id_eval"] and len(groups["OOD"]) == 7 and len(groups["mixed"]) == 8
    assert [e["step"] for e in saved["checkpoints"] if e["status"] == "done"] == [4, 8]
    assert "ID size" in printed and "effective_size.json" in printed
    assert (tmp_path / "effective_size.png").is_file()
    with pytest.raises(EffectiveSizeError, match="no evaluation data"):
        effective_size_command([str(tmp_path)])


def test_figure_is_named_after_the_results_file(run_dir, data):
    track(run_dir, data, max_checkpoints=1, results_file=run_dir / "es_grid.json")
    assert (run_dir / "es_grid.png").is_file() and (run_dir / "es_grid.pdf").is_file()
    assert not (run_dir / "effective_size.png").exists()
