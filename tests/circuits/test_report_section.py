"""The circuit section of `analyze`: curves of every run computed with the model (`circuits=True`), read back from
`RUNS_DIR/circuits/curves.json` without it, the figure, and the table's numbers against the curves file."""

from __future__ import annotations

import json

import datasets
import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.analysis import run_name, write_json
from hf_heuristic_core.analysis.report import analyze
from hf_heuristic_core.circuits.report import (
    CURVES_NAME,
    circuit_markdown,
    circuit_section,
    curves_document,
    write_curves,
)
from hf_heuristic_core.circuits.sources import load_unit_scores
from hf_heuristic_core.circuits.warm_start import warm_start_logits
from tiny_models import one_torch_thread, tiny_model  # noqa: F401

pytest.importorskip("matplotlib")
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _rows(n: int, seed: int) -> list[dict]:
    generator = torch.Generator().manual_seed(seed)
    return [{"input_ids": [1, *torch.randint(5, 60, (6,), generator=generator).tolist(), 2],
             "attention_mask": [1] * 8, "labels": int(torch.randint(0, 3, (1,), generator=generator))}
            for _ in range(n)]


@pytest.fixture
def runs_dir(tmp_path):
    runs = tmp_path / "runs"
    model = PrunableModel(tiny_model("bert"), PruningConfig(ablation="zero"))
    for seed in (0, 1):
        generator = torch.Generator().manual_seed(seed)
        warm_start_logits(model, {"heads": torch.rand(2, 4, generator=generator),
                                  "mlps": torch.rand(2, generator=generator)}, spread=2.0)
        folder = runs / run_name(0.5, seed)
        model.save_pretrained(folder, sparsity=0.5)
        write_json(folder / "result.json", {"run": folder.name, "sparsity": 0.5, "seed": seed,
                                            "realized_sparsity": 0.5, "units_kept": 5, "units_total": 10,
                                            "eval": {"id": {"accuracy": 0.5, "agreement": 0.9, "kl": 0.1,
                                                            "num_examples": 20}}})
    write_json(runs / "full_model.json", {"accuracy": {"id": 0.6}, "num_examples": {"id": 20}})
    write_json(runs / "manifest.json", {"model": None, "eval_sets": ["id"], "sparsities": [0.5], "seeds": [0, 1]})
    return runs


def test_analyze_computes_and_reports_circuit_curves(runs_dir):
    model = PrunableModel(tiny_model("bert"), PruningConfig(ablation="zero"))
    sets = {"id": datasets.Dataset.from_list(_rows(12, 3))}
    report = analyze(runs_dir, model=model, tokenizer=object(), eval_sets=sets, ablation=False, attention=False,
                     circuits=True, show_progress=False)
    document = json.loads((runs_dir / "circuits" / CURVES_NAME).read_text())
    assert set(document["curves"]) == {"sp50-seed0", "sp50-seed1", "random-seed0", "random-seed1", "random-seed2"}
    assert document["curves"]["sp50-seed0"]["group"] == "learned masks, 50% sparsity"
    assert document["ablation"] == "zero" and document["examples"] == 12
    section = report["circuits"]
    rows = {row["group"]: row for row in section["rows"]}
    assert set(rows) == {"learned masks, 50% sparsity", "random ranking"} and rows["random ranking"]["n"] == 3
    learned = [document["curves"][f"sp50-seed{s}"] for s in (0, 1)]
    assert rows["learned masks, 50% sparsity"]["cpr_mean"] == pytest.approx(sum(c["cpr"] for c in learned) / 2)
    assert rows["learned masks, 50% sparsity"]["cmd_max"] == pytest.approx(max(c["cmd"] for c in learned))
    for curve in document["curves"].values():
        assert curve["faithfulness"][-1] == pytest.approx(1.0)
    assert (runs_dir / "report" / "faithfulness_curves.png").read_bytes()[:4] == b"\x89PNG"
    markdown = (runs_dir / "report" / "report.md").read_text()
    assert "## Circuits: faithfulness over circuit size (MIB)" in markdown
    cpr = rows["learned masks, 50% sparsity"]["cpr_mean"]
    assert f"| learned masks, 50% sparsity | 2 | {cpr:.3f} (" in markdown
    assert "![faithfulness over circuit size](faithfulness_curves.png)" in markdown


def test_analyze_reads_an_existing_curves_file_without_a_model(runs_dir, caplog):
    # circuits=True without a model: a warning, and no section while there is no curves file.
    report = analyze(runs_dir, ablation=False, attention=False, circuits=True)
    assert "circuits" not in report and "Skipping the circuit faithfulness curves" in caplog.text
    assert circuit_section(runs_dir, runs_dir / "report") is None and circuit_markdown(None) == []
    # A curves file written by `circuit faithfulness --runs_dir` (here: its functions) is reported without a model.
    model = PrunableModel(tiny_model("bert"), PruningConfig(ablation="zero"))
    rankings = {"sp50-seed0": load_unit_scores(runs_dir / "sp50-seed0", model.mask_shapes())}
    document = curves_document(model, datasets.Dataset.from_list(_rows(8, 4)), rankings, random_seeds=(0,))
    write_curves(runs_dir / "circuits", document)
    assert (runs_dir / "circuits" / "faithfulness_curves.png").is_file()
    report = analyze(runs_dir, output_dir=runs_dir / "again", ablation=False, attention=False)
    assert report["circuits"]["examples"] == 8
    assert [row["group"] for row in report["circuits"]["rows"]] == ["sp50-seed0", "random ranking"]
    assert (runs_dir / "again" / "faithfulness_curves.png").is_file()
    assert "## Circuits" in (runs_dir / "again" / "report.md").read_text()
    # A curves file of an earlier version (one curve per ranking, its CMD the signed ranking's) is flagged as such.
    for curve in document["curves"].values():
        for key in ("cmd_signed_ranking", "cpr_absolute_ranking", "faithfulness_absolute", "metric_values_absolute",
                    "mib_cmd"):
            curve.pop(key)
    write_curves(runs_dir / "circuits", document)
    report = analyze(runs_dir, output_dir=runs_dir / "old", ablation=False, attention=False)
    assert [row["mib_cmd"] for row in report["circuits"]["rows"]] == [False, False]
    assert "is that of the signed ranking, not MIB's" in (runs_dir / "old" / "report.md").read_text()
