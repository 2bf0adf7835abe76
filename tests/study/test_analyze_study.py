"""`analyze` on a study's runs folder rebuilds the study's evaluation sets from the recorded data spec and gives
the same tables the study wrote (the ablation table and attention patterns are not skipped), also for a runs folder
whose manifest holds an older study's data record."""

from __future__ import annotations

import json

import pytest
from tiny_models import one_torch_thread  # noqa: F401

from hf_heuristic_core.analysis.report import analyze

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]   # reads the shared tiny study
pytest.importorskip("matplotlib")

# An older study's data record of the same generated data as the shared tiny study (tests/study/conftest.py).
OLD_RECORD = {"train": None, "id_eval": None, "ood_eval": None, "max_length": 24,
              "generated": {"train_size": 48, "id_eval_size": 40, "ood_per_case": 3,
                            "counter_heuristic_fraction": 0.05, "seed": 0}}


def _tables(report: dict) -> dict:
    keep = {"ablation": report["ablation"], "attention": {k: report["attention"][k] for k in
                                                          ("eval_set", "rows", "num_examples", "all_heads")}}
    return json.loads(json.dumps(keep, default=str))


def test_analyze_on_a_study_runs_folder_gives_the_studys_tables(tmp_path, tiny_study):
    from shared_builds import copy_of
    out = tmp_path / "study"
    copy_of(tiny_study / "runs", out / "runs")   # this test rewrites the manifest below
    written = json.loads((tiny_study / "report.json").read_text())["analysis"]
    assert "skipped" not in written["ablation"] and "skipped" not in written["attention"]

    manifest_path = out / "runs" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    assert list(manifest["data"]["eval_sets"]) == written["eval_sets"] and len(written["eval_sets"]) == 8
    assert manifest["data"]["train"]["source"] == "generate_nli"

    # heatmaps=0: the attention table without its 3 heatmap figures (the tables are what is compared here; the
    # figures are drawn by the study itself and by tests/analysis)
    again = analyze(out / "runs", output_dir=tmp_path / "again", non_core_sample=1, max_core_units=1, heatmaps=0,
                    show_progress=False)
    assert "skipped" not in again["ablation"] and "skipped" not in again["attention"]
    assert _tables(again) == _tables(written)

    # The manifest of a study written before the one data-spec format.
    manifest["data"] = OLD_RECORD
    manifest_path.write_text(json.dumps(manifest))
    old = analyze(out / "runs", output_dir=tmp_path / "old", non_core_sample=1, max_core_units=1, heatmaps=0,
                  show_progress=False)
    assert _tables(old) == _tables(written)
