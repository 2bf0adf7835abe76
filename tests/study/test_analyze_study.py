"""`analyze` on a study's runs folder rebuilds the study's evaluation sets from the recorded data spec and gives
the same tables the study wrote (the ablation table and attention patterns are not skipped), also for a runs folder
whose manifest holds an older study's data record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import transformers
from tiny_models import one_torch_thread  # noqa: F401

from hf_heuristic_core.analysis.report import analyze
from hf_heuristic_core.study import StudyArguments
from hf_heuristic_core.study.run import run_study

pytestmark = [pytest.mark.usefixtures("one_torch_thread"), pytest.mark.slow]   # ~50 s on 2 busy cores
pytest.importorskip("matplotlib")

OLD_RECORD = {"train": None, "id_eval": None, "ood_eval": None, "max_length": 24,
              "generated": {"train_size": 48, "id_eval_size": 16, "ood_per_case": 3,
                            "counter_heuristic_fraction": 0.05, "seed": 0}}


@pytest.fixture(scope="module")
def tiny_classifier(tmp_path_factory, minilm_dir) -> Path:
    """A random 2-layer BERT sequence classifier with MiniLM's tokenizer: the study skips fine-tuning for it."""
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_attention_heads=4,
                                     num_hidden_layers=2, intermediate_size=48, max_position_embeddings=64,
                                     num_labels=2, initializer_range=0.2)
    transformers.set_seed(0)
    folder = tmp_path_factory.mktemp("tiny_classifier")
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _tables(report: dict) -> dict:
    keep = {"ablation": report["ablation"], "attention": {k: report["attention"][k] for k in
                                                          ("eval_set", "rows", "num_examples", "all_heads")}}
    return json.loads(json.dumps(keep, default=str))


def test_analyze_on_a_study_runs_folder_gives_the_studys_tables(tmp_path, tiny_classifier):
    out = tmp_path / "study"
    args = StudyArguments(output_dir=str(out), model=str(tiny_classifier), train_size=48, id_eval_size=16,
                          ood_per_case=3, max_length=24, sparsities="0.5", seeds="0,1", prune_steps=4,
                          prune_batch_size=8, means_examples=16, ablation_non_core_sample=1, max_core_units=1,
                          device="cpu")
    run_study(args)
    written = json.loads((out / "report.json").read_text())["analysis"]
    assert "skipped" not in written["ablation"] and "skipped" not in written["attention"]

    manifest_path = out / "runs" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    assert list(manifest["data"]["eval_sets"]) == written["eval_sets"] and len(written["eval_sets"]) == 8
    assert manifest["data"]["train"]["source"] == "generate_nli"

    again = analyze(out / "runs", output_dir=tmp_path / "again", non_core_sample=1, max_core_units=1,
                    show_progress=False)
    assert "skipped" not in again["ablation"] and "skipped" not in again["attention"]
    assert _tables(again) == _tables(written)

    # The manifest of a study written before the one data-spec format.
    manifest["data"] = OLD_RECORD
    manifest_path.write_text(json.dumps(manifest))
    old = analyze(out / "runs", output_dir=tmp_path / "old", non_core_sample=1, max_core_units=1,
                  show_progress=False)
    assert _tables(old) == _tables(written)
