"""The Subtask Induction runner: records per (arm, k, seed), resume after an interruption, report and warnings."""

from __future__ import annotations

import json

import pytest

from hf_heuristic_core.cli.induce import InductionArguments
from hf_heuristic_core.errors import UsageError
from hf_heuristic_core.induction.report import compare_arms, summarize, warnings_for
from hf_heuristic_core.induction.runner import load_masks, run_induction

TINY = dict(num_tokens=12, eval_size=30, epochs=2, source_epochs=3, mask_epochs=2, layers=1, hidden=16, heads=2,
            inner=32, batch_size=16)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A tiny reproduction's source and subnetwork, trained once for the module (also tests --arithmetic)."""
    out = tmp_path_factory.mktemp("si")
    report = run_induction(InductionArguments(output_dir=str(out), arithmetic=True, arms="subnetwork,scratch",
                                              seeds="0", ks="4", figure=False, **TINY))
    return out, report


def test_arithmetic_run_writes_source_masks_records_and_report(prepared):
    out, report = prepared
    assert (out / "source" / "config.json").exists() and (out / "subnetwork" / "pruning_config.json").exists()
    records = sorted((out / "runs").glob("*.json"))
    assert [p.name for p in records] == ["scratch-k4-seed0.json", "subnetwork-k4-seed0.json"]
    record = json.loads(records[1].read_text())
    # 12 diagonal + 4 disambiguating rows, batch 16 -> 1 step per epoch, 2 epochs.
    assert record["train_rows"] == 16 and record["steps"] == 2 and record["epochs"] == 2.0
    assert len(record["validation_history"]) == 2 and record["best_validation"] == max(record["validation_history"])
    assert record["best_epoch"] == 1 + record["validation_history"].index(record["best_validation"])
    # The subnetwork arm froze exactly the kept entries, and training (AdamW, decay 0.01) left them as in the source.
    kept = int(sum(m.sum() for m in load_masks(str(out / "subnetwork")).values()))
    assert record["frozen_entries"] == kept and record["transplant_intact"] is True
    scratch = json.loads(records[0].read_text())
    assert scratch["frozen_entries"] == 0 and scratch["transplant_intact"] is True
    assert [(r["arm"], r["k"], r["n"]) for r in report["summary"]] == [("subnetwork", 4, 1), ("scratch", 4, 1)]
    diagnostics = report["diagnostics"]
    assert 0 < diagnostics["kept_fraction"] < 1 and 0 <= diagnostics["subnetwork_accuracy"] <= 1
    # Three source epochs learn nothing: the report must say the source does not do T1.
    assert any("source model scores" in w for w in report["warnings"])
    assert "## Warnings" in (out / "report.md").read_text()


def test_interrupted_run_resumes_without_retraining_finished_records(prepared, tmp_path, monkeypatch):
    source_dir, _ = prepared
    args = dict(output_dir=str(tmp_path), source=str(source_dir / "source"),
                masks=str(source_dir / "subnetwork"), arms="subnetwork,random", seeds="0",
                ks="4", figure=True, **TINY)
    calls = []
    from hf_heuristic_core.induction import training

    original = training.train_last_token

    def interrupted(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt   # killed while training the second run
        return original(*a, **k)

    monkeypatch.setattr(training, "train_last_token", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_induction(InductionArguments(**args))
    first = tmp_path / "runs" / "subnetwork-k4-seed0.json"
    assert first.exists() and not (tmp_path / "runs" / "random-k4-seed0.json").exists()
    written = first.read_text()
    calls.clear()
    monkeypatch.setattr(training, "train_last_token", lambda *a, **k: (calls.append(1), original(*a, **k))[1])
    report = run_induction(InductionArguments(**args))
    assert len(calls) == 1 and first.read_text() == written          # only the missing run trained
    assert [r["arm"] for r in report["summary"]] == ["subnetwork", "random"]
    assert (tmp_path / "induction.png").exists() and (tmp_path / "report.json").exists()
    # Other training settings in the same folder are refused, not mixed in.
    with pytest.raises(UsageError, match=r"other settings \(saved vs now: \{'learning_rate': \(0.003, 0.01\)\}"):
        run_induction(InductionArguments(**{**args, "learning_rate": 1e-2}))


def test_in_memory_source_and_masks(prepared, tmp_path):
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM
    out, _ = prepared
    source = AutoModelForCausalLM.from_pretrained(out / "source")
    masks = load_masks(str(out / "subnetwork"))          # the mask artifact the --arithmetic run wrote
    save_file(masks, tmp_path / "plain.safetensors")     # a bare masks file works too
    assert load_masks(str(tmp_path / "plain.safetensors")).keys() == masks.keys()
    report = run_induction(InductionArguments(output_dir=str(tmp_path), source="in-memory", masks="in-memory",
                                              arms="full", seeds="1", ks="0", figure=False, **TINY),
                           source=source, masks=masks)
    assert report["summary"][0]["arm"] == "full" and report["summary"][0]["k"] == 0


def test_summary_and_comparisons_by_hand():
    records = [{"arm": "subnetwork", "k": 10, "seed": s, "test_accuracy": v} for s, v in enumerate([0.5, 0.6, 0.7])]
    records += [{"arm": "scratch", "k": 10, "seed": s, "test_accuracy": v} for s, v in enumerate([0.4, 0.45, 0.3])]
    records += [{"arm": "random", "k": 10, "seed": s, "test_accuracy": v} for s, v in enumerate([0.55, 0.2, 0.3])]
    summary = summarize(records)
    assert summary[0] == {"arm": "subnetwork", "k": 10, "n": 3, "mean": pytest.approx(0.6), "min": 0.5, "max": 0.7,
                          "values": [0.5, 0.6, 0.7]}
    comparisons = {c["control"]: c for c in compare_arms(summary)}
    assert comparisons["scratch"]["difference"] == pytest.approx(0.6 - 1.15 / 3) and comparisons["scratch"]["separated"]
    assert comparisons["random"]["difference"] == pytest.approx(0.6 - 0.35) and not comparisons["random"]["separated"]


def test_warnings_name_each_meaningless_result():
    records = [{"arm": "scratch", "k": 0, "seed": 0, "epochs": 0.5, "best_validation": 0.15, "test_accuracy": 0.1}]
    records.append({**records[0], "epochs": 3, "transplant_intact": False})
    notes = warnings_for(records, {"source_accuracy": 0.5, "subnetwork_accuracy": 0.3, "kept_fraction": 1.0},
                         chance=1 / 7)
    assert len(notes) == 6
    assert [n.split()[1] for n in notes] == ["source", "subnetwork", "subnetwork", "run(s)", "(frozen)", "run"]
    assert warnings_for([{**records[0], "epochs": 3, "best_validation": 0.9}],
                        {"source_accuracy": 0.99, "subnetwork_accuracy": 0.99, "kept_fraction": 0.3},
                        chance=1 / 7) == []


@pytest.mark.parametrize("flags, message", [
    (dict(arms="subnetwork,bogus", arithmetic=True), "unknown arm"),
    (dict(seeds="0,x", arithmetic=True), "must list integers"),
    (dict(ks="5,5", arithmetic=True), "distinct integers"),
    (dict(), "--arithmetic"),
])
def test_bad_arguments_are_refused(flags, message):
    with pytest.raises(UsageError, match=message):
        InductionArguments(**flags)


def test_missing_source_folder_is_named(tmp_path):
    with pytest.raises(UsageError, match="config.json missing"):
        run_induction(InductionArguments(output_dir=str(tmp_path), source=str(tmp_path / "nope"),
                                         masks=str(tmp_path / "m.safetensors"), **TINY))


def test_figure_draws_the_mean_line_and_the_seed_band():
    from hf_heuristic_core.plotting.induction import plot_induction_curves
    records = [{"arm": a, "k": k, "seed": s, "test_accuracy": v} for a, k, s, v in [
        ("subnetwork", 20, 0, 0.4), ("subnetwork", 20, 1, 0.5), ("subnetwork", 100, 0, 0.6), ("subnetwork", 100, 1, 0.8),
        ("scratch", 20, 0, 0.3), ("scratch", 100, 0, 0.5)]]
    figure = plot_induction_curves(summarize(records), chance=1 / 7)
    axes = figure.axes[0]
    assert list(axes.lines[0].get_xdata()) == [20, 100]
    assert list(axes.lines[0].get_ydata()) == pytest.approx([0.45, 0.7])
    band = axes.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(0.4) and band.max() == pytest.approx(0.8)
    assert axes.lines[-1].get_ydata()[0] == pytest.approx(1 / 7) and axes.get_xscale() == "log"
    with pytest.raises(ValueError, match="summary is empty"):
        plot_induction_curves([])


def test_source_with_another_vocabulary_is_refused(prepared, tmp_path):
    out, _ = prepared
    with pytest.raises(UsageError, match="pass --num_tokens 12"):
        run_induction(InductionArguments(output_dir=str(tmp_path), source=str(out / "source"),
                                         masks=str(out / "subnetwork"), **{**TINY, "num_tokens": 10}))


def test_figure_ticks_are_the_k_values():
    from hf_heuristic_core.plotting.induction import plot_induction_curves
    rows = [{"arm": "scratch", "k": k, "n": 1, "mean": 0.5, "min": 0.5, "max": 0.5} for k in (20, 100)]
    axes = plot_induction_curves(rows).axes[0]
    assert [t.get_text() for t in axes.get_xticklabels()] == ["20", "100"]


def test_own_target_data_skips_the_arithmetic_checks(prepared, tmp_path):
    from hf_heuristic_core.induction.arithmetic import induction_splits
    out, _ = prepared
    calls = []

    def data(k):
        calls.append(k)
        return induction_splits(k, num_tokens=12, eval_size=10, seed=5, task="s1")

    report = run_induction(InductionArguments(output_dir=str(tmp_path), source=str(out / "source"),
                                              masks=str(out / "subnetwork"), arms="subnetwork", seeds="0", ks="2",
                                              figure=False, **TINY), data=data)
    assert calls == [2] and set(report["diagnostics"]) == {"kept_fraction", "source_test_accuracy"}
    record = json.loads((tmp_path / "runs" / "subnetwork-k2-seed0.json").read_text())
    assert record["train_rows"] == 14 and record["transplant_intact"] is True


def test_reusing_a_source_or_subnetwork_made_with_other_settings_is_refused(prepared, tmp_path):
    import shutil
    out, _ = prepared
    shutil.copytree(out / "source", tmp_path / "source")
    shutil.copytree(out / "subnetwork", tmp_path / "subnetwork")
    base = dict(output_dir=str(tmp_path), arithmetic=True, arms="scratch", seeds="0", ks="1", figure=False)
    with pytest.raises(UsageError, match="source was made with other settings.*'source_epochs': \\(3, 4\\)"):
        run_induction(InductionArguments(**base, **{**TINY, "source_epochs": 4}))
    with pytest.raises(UsageError, match="subnetwork was made with other settings.*mask_target_modules"):
        run_induction(InductionArguments(**base, **{**TINY, "mask_target_modules": "c_fc"}))
