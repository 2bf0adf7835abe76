"""`hf-heuristic-core analyze RUNS_DIR --subtasks ...`: the subtask section next to a unit report."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.analysis.results import write_json
from hf_heuristic_core.cli import main
from tiny_models import tiny_model


def _unit_run(runs):
    """One finished prune_many-style run of unit masks on a tiny BERT (2 layers x 4 heads + 2 MLPs)."""
    model = PrunableModel(tiny_model("bert"), PruningConfig(ablation="zero"))
    folder = runs / "sp50-seed0"
    model.set_masks(heads=torch.tensor([[1., 0, 1, 0], [1, 1, 0, 0]]), mlps=torch.tensor([1., 0]))
    model.save_pretrained(folder)
    write_json(folder / "result.json", {"run": folder.name, "sparsity": 0.5, "seed": 0, "realized_sparsity": 0.5,
                                        "units_kept": 5, "units_total": 10,
                                        "eval": {"id": {"accuracy": 0.8, "agreement": 0.9, "kl": 0.1,
                                                        "num_examples": 20}}})
    write_json(runs / "full_model.json", {"accuracy": {"id": 0.9}, "num_examples": {"id": 20}})
    write_json(runs / "manifest.json", {"model": None, "eval_sets": ["id"], "sparsities": [0.5], "seeds": [0]})


def _weight_masks(folder, rows):
    torch.manual_seed(0)
    pm = PrunableModel(nn.Sequential(nn.Linear(4, 2)), PruningConfig(granularity="weight"))
    pm.set_masks({"0.weight": torch.tensor(rows, dtype=torch.float32)})
    pm.save_pretrained(folder)


def test_analyze_cli_adds_the_subtask_section(tmp_path, capsys):
    runs = tmp_path / "runs"
    _unit_run(runs)
    _weight_masks(runs / "add", [[1, 1, 1, 0], [0, 0, 0, 0]])    # 3 kept
    _weight_masks(runs / "mul", [[0, 0, 1, 1], [1, 0, 0, 0]])    # 3 kept, 1 shared: IoU 1/5, IoMin 1/3
    code = main(["analyze", str(runs), "--no_ablation", "--no_attention", "--subtasks", "add=add,mul=mul"])
    assert code == 0
    printed = capsys.readouterr().out
    # each mask keeps 3 entries, 1 of them shared: 1/3 of each mask's entries (the IoU, 1/5, is not this number)
    assert "1 subnetworks" in printed and "shared fraction (total) add 0.333, mul 0.333" in printed
    report = json.loads((runs / "report" / "report.json").read_text())
    total = report["subtasks"]["overlap"]["add vs mul"]["total"]
    assert total["iou"] == pytest.approx(1 / 5) and total["iomin"] == pytest.approx(1 / 3)
    assert report["subtasks"]["sharing"]["add"]["0.weight"] == pytest.approx(1 / 3)
    text = (runs / "report" / "report.md").read_text()
    assert "## Accuracy per evaluation set" in text and "## Subtask masks" in text
    assert "| 0.weight | 3 | 3 | 0.200 | 0.333 |" in text and "(subtask_sharing.png)" in text


def test_analyze_cli_reports_a_bad_subtasks_flag_in_one_line(tmp_path, capsys):
    runs = tmp_path / "runs"
    _unit_run(runs)
    code = main(["analyze", str(runs), "--no_ablation", "--no_attention", "--subtasks", "add=add,mul"])
    assert code != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "name=mask_folder" in err[0]
