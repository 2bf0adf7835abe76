"""`analyze` on a folder of subtask masks: the numbers in report.json / report.md against numpy by hand."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.analysis.report import analyze
from hf_heuristic_core.analysis.subtask_report import parse_subtasks_flag, read_subtask_declaration
from hf_heuristic_core.errors import ArtifactError

A = {"0.weight": np.array([[1, 1, 0], [0, 1, 0]]), "2.weight": np.array([[1, 0], [0, 0]])}
B = {"0.weight": np.array([[1, 0, 0], [1, 1, 1]]), "2.weight": np.array([[0, 1], [0, 0]])}
FULL = {"0.weight": np.ones((2, 3)), "2.weight": np.array([[1, 1], [0, 0]])}


def _save(folder, masks):
    torch.manual_seed(0)
    pm = PrunableModel(nn.Sequential(nn.Linear(3, 2), nn.ReLU(), nn.Linear(2, 2)),
                       PruningConfig(granularity="weight"))
    pm.set_masks({k: torch.tensor(v, dtype=torch.float32) for k, v in masks.items()})
    pm.save_pretrained(folder)


@pytest.fixture
def runs(tmp_path):
    for name, masks in (("sr1", A), ("sr2", B), ("full", FULL)):
        _save(tmp_path / "masks" / name, masks)
    return tmp_path


def test_subtask_only_folder_gets_overlap_sharing_and_remaining_by_hand(runs):
    (runs / "subtasks.json").write_text(json.dumps({"masks": {"sr1": "masks/sr1", "sr2": "masks/sr2"},
                                                    "reference": "masks/full"}))
    report = analyze(runs, ablation=False, attention=False)
    section = report["subtasks"]
    a, b = (m["0.weight"].astype(bool) for m in (A, B))
    layer0 = section["overlap"]["sr1 vs sr2"]["0.weight"]
    assert layer0["iou"] == pytest.approx((a & b).sum() / (a | b).sum())                # 2 / 5
    assert layer0["iomin"] == pytest.approx((a & b).sum() / min(a.sum(), b.sum()))     # 2 / 3
    assert section["overlap"]["sr1 vs sr2"]["total"]["iou"] == pytest.approx(2 / 7)
    assert section["sharing"]["sr1"]["0.weight"] == pytest.approx(2 / 3)
    assert section["sharing"]["sr2"]["0.weight"] == pytest.approx(2 / 4)
    assert section["sharing"]["sr1"]["2.weight"] == 0.0
    assert section["kept"] == {"sr1": pytest.approx(4 / 10), "sr2": pytest.approx(5 / 10)}
    assert section["remaining"]["sr1"]["total"] == pytest.approx(4 / 8)                 # |A & M0| / |M0|
    assert section["remaining"]["sr2"]["total"] == pytest.approx(5 / 8)
    # independent random masks of these per-layer sizes: E|A&B| = 3*4/6 + 1*1/4 = 2.25
    assert section["chance_overlap"]["sr1 vs sr2"]["iou"] == pytest.approx(2.25 / (4 + 5 - 2.25))
    assert section["chance_overlap"]["sr1 vs sr2"]["iomin"] == pytest.approx(2.25 / 4)
    assert (runs / "report" / "subtask_sharing.png").is_file()
    text = (runs / "report" / "report.md").read_text()
    assert "| 0.weight | 3 | 4 | 0.400 | 0.667 |" in text
    assert "No accuracies recorded" in text and "total IoU of about 0.333 and IoMin of 0.562" in text
    saved = json.loads((runs / "report" / "report.json").read_text())["subtasks"]
    # "total" is the per-layer quantity over all layers: sr2 keeps 5 entries, 2 of them also kept by sr1 (before, the
    # total divided by the union, 2 / 7, the IoU; that number is now "sharing_over_union").
    assert saved["sharing"]["sr2"]["total"] == pytest.approx(2 / 5)
    assert saved["sharing"]["sr1"]["total"] == pytest.approx(2 / 4)
    assert saved["sharing_over_union"]["sr2"] == pytest.approx(2 / 7)


def test_recorded_accuracies_give_the_drop_table_and_scores_by_hand(runs):
    accuracy = {"full": {"sr1": 0.99, "sr2": 0.97}, "sr1": {"sr1": 0.95, "sr2": 0.30},
                "NOT sr1": {"sr1": 0.25, "sr2": 0.90}, "sr2": {"sr1": 0.60, "sr2": 0.96}}
    (runs / "subtasks.json").write_text(json.dumps({"masks": {"sr1": "masks/sr1", "sr2": "masks/sr2"},
                                                    "accuracy": accuracy}))
    section = analyze(runs, ablation=False, attention=False)["subtasks"]
    drop = {row["mask"]: row for row in section["performance_drop"]}
    assert drop["NOT sr1"]["drop_sr1"] == pytest.approx(0.99 - 0.25)
    assert drop["sr2"]["drop_sr2"] == pytest.approx(0.97 - 0.96)
    scores = {(r["mask"], r["other"]): r for r in section["scores"]}
    assert scores[("sr1", "sr2")]["specialization"] == pytest.approx(0.95 - 0.30)
    assert scores[("sr1", "sr2")]["exclusivity"] == pytest.approx(0.90 - 0.25)
    assert scores[("sr2", "sr1")]["specialization"] == pytest.approx(0.96 - 0.60)
    assert "exclusivity" not in scores[("sr2", "sr1")]                                   # NOT sr2 not recorded
    text = (runs / "report" / "report.md").read_text()
    assert "| sr1 | sr2 | 0.650 | 0.650 |" in text and "| sr2 | sr1 | 0.360 | – |" in text


def test_subtasks_argument_replaces_the_declared_masks(runs):
    (runs / "subtasks.json").write_text(json.dumps({"masks": {"x": "masks/sr1", "y": "masks/sr1"}}))
    section = analyze(runs, ablation=False, attention=False,
                      subtasks={"sr1": "masks/sr1", "full": "masks/full"})["subtasks"]
    assert section["names"] == ["sr1", "full"]
    assert section["overlap"]["sr1 vs full"]["total"]["iomin"] == pytest.approx(1.0)      # A is inside M0


def test_bad_declarations_say_what_to_fix(runs):
    with pytest.raises(ArtifactError, match="at least two subtask names"):
        read_subtask_declaration(runs, {"sr1": "masks/sr1"})
    with pytest.raises(ArtifactError, match="does not exist"):
        analyze(runs, ablation=False, attention=False, subtasks={"sr1": "masks/sr1", "sr2": "masks/nope"})
    (runs / "subtasks.json").write_text(json.dumps({"masks": {"sr1": "masks/sr1", "sr2": "masks/sr2"},
                                                    "accuracy": {"full": {"sr1": 1, "sr2": 1},
                                                                 "sr1": {"sr1": 1}}}))
    with pytest.raises(ArtifactError, match="missing: sr1/sr2, sr2/sr1, sr2/sr2"):
        analyze(runs, ablation=False, attention=False)
    (runs / "subtasks.json").write_text(json.dumps({"masks": {"sr1": "masks/sr1", "sr2": "masks/sr2"},
                                                    "accuracy": {"full": {"sr1": 1, "sr2": 1},
                                                                 "sr1": {"sr1": 1, "sr2": 0.3},
                                                                 "sr2": {"sr1": 95, "sr2": None}}}))
    with pytest.raises(ArtifactError, match=r"numbers in \[0, 1\]; got sr2/sr1=95, sr2/sr2=None"):
        analyze(runs, ablation=False, attention=False)
    (runs / "subtasks.json").write_text("{not json")
    with pytest.raises(ArtifactError, match="is not a JSON object"):
        analyze(runs, ablation=False, attention=False)
    with pytest.raises(ValueError, match="name=mask_folder"):
        parse_subtasks_flag("sr1=a,sr2")
    with pytest.raises(ValueError, match="twice"):
        parse_subtasks_flag("sr1=a,sr1=b")
    assert parse_subtasks_flag("sr1=a, sr2=b") == {"sr1": "a", "sr2": "b"}


def test_folder_without_runs_or_declaration_still_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no finished runs"):
        analyze(tmp_path, ablation=False, attention=False)


def test_chance_overlap_matches_random_masks_drawn_with_numpy():
    from hf_heuristic_core.analysis.subtask_report import chance_overlap
    rng = np.random.default_rng(0)
    sizes = {"a.weight": (40, 50), "b.weight": (30, 30)}
    kept_a, kept_b = {"a.weight": 700, "b.weight": 100}, {"a.weight": 300, "b.weight": 600}

    def draw(kept):
        out = {}
        for name, shape in sizes.items():
            flat = np.zeros(np.prod(shape))
            flat[rng.choice(flat.size, kept[name], replace=False)] = 1
            out[name] = flat.reshape(shape)
        return out
    ious, iomins = [], []
    for _ in range(300):
        a, b = draw(kept_a), draw(kept_b)
        inter = sum((a[k] * b[k]).sum() for k in sizes)
        ious.append(inter / (800 + 900 - inter))
        iomins.append(inter / 800)
    chance = chance_overlap({k: torch.tensor(v) for k, v in draw(kept_a).items()},
                            {k: torch.tensor(v) for k, v in draw(kept_b).items()})
    assert chance["iou"] == pytest.approx(np.mean(ious), rel=0.02)
    assert chance["iomin"] == pytest.approx(np.mean(iomins), rel=0.02)
