"""`repro_csordas_add_mul.py` (Csordás et al., Table 2): the data against their `dataset/double_op.py` and
`interfaces/feedforward/add_mul.py` on hand-computed rows, the per-operation accuracy, and that a run on tiny
settings (8 hidden units, a few steps, ~3 s) writes every Table 2 cell and the mask overlap, the overlap checked
against the saved masks by hand."""

from __future__ import annotations

import json
import sys
from types import ModuleType

import numpy as np
import pytest
import torch
from benchmark_scripts import load_script


@pytest.fixture(scope="module")
def add_mul() -> ModuleType:
    return load_script("reproductions/repro_csordas_add_mul")


def test_rows_follow_their_generator(add_mul):
    """`DoubleOpDataset`: RandomState(0x12345678 + index of the set in train/test/valid), numbers then ops."""
    for name, offset in (("train", 0), ("valid", 2)):
        state = np.random.RandomState(0x12345678 + offset)
        numbers, ops = state.randint(0, 100, (6, 2)), state.randint(0, 2, (6,))
        rows = add_mul.dataset(name, 6)
        assert rows[:, :2].tolist() == numbers.tolist() and rows[:, 2].tolist() == ops.tolist()


def test_encoding_by_hand(add_mul):
    rows = torch.tensor([[37, 48, 0], [37, 48, 1], [5, 20, 1], [99, 99, 0]])
    inputs, target = add_mul.encode(rows)
    # 37 + 48 = 85; 37 * 48 = 1776 -> 76; 5 * 20 = 100 -> 00; 99 + 99 = 198 -> 98 (digits ones first)
    assert target.tolist() == [[5, 8], [6, 7], [0, 0], [8, 9]]
    assert inputs.shape == (4, 42)
    # 37: ones 7 (index 7), tens 3 (10 + 3); 48: 20 + 8, 30 + 4; the operation at 40 (add) or 41 (mul)
    assert torch.nonzero(inputs[0]).flatten().tolist() == [7, 13, 28, 34, 40]
    assert torch.nonzero(inputs[1]).flatten().tolist() == [7, 13, 28, 34, 41]
    assert torch.nonzero(inputs[2]).flatten().tolist() == [5, 10, 20, 32, 41]


class _AlwaysAdds(torch.nn.Module):
    """Reads a and b back from the one-hots and answers a + b whatever the operation."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        d = x[:, :40].view(-1, 4, 10).argmax(-1)
        total = (d[:, 0] + 10 * d[:, 1] + d[:, 2] + 10 * d[:, 3]) % 100
        return torch.nn.functional.one_hot(torch.stack([total % 10, total // 10], 1), 10).float().flatten(1)


def test_accuracy_per_operation(add_mul):
    """Add rows right; of the mul rows only 2 * 2 = 2 + 2 is."""
    rows = torch.tensor([[37, 48, 0], [37, 48, 1], [2, 2, 1], [10, 11, 0]])
    assert add_mul.accuracy(_AlwaysAdds(), rows) == [1.0, 0.5]


def test_tiny_run_writes_table2_and_overlap(add_mul, tmp_path, monkeypatch):
    output = tmp_path / "out.json"
    monkeypatch.setattr(sys, "argv", ["x", "--hidden", "8", "--base_steps", "5", "--mask_steps", "4",
                                      "--eval_every", "2", "--seeds", "0", "--train_size", "400", "--valid_size",
                                      "200", "--run_dir", str(tmp_path / "run"), "--output", str(output)])
    add_mul.main()
    result = json.loads(output.read_text())
    table = result["summary"]["table2"]
    assert list(table) == ["base", "M_full", "NOT M_full", "M_add", "NOT M_add", "M_mul", "NOT M_mul"]
    assert all(set(cells) == {"add", "mul"} for cells in table.values())
    run = result["runs"][0]
    assert [p["step"] for p in run["curve_add"]] == [2, 4]
    assert result["settings"]["clip_scope"] == "all" and result["settings"]["alpha"] == 1e-4
    # the paper's Table 2 (FNN) travels with every result, keyed by the rows it compares to
    assert result["paper_table2"]["NOT M_add"] == [0.13, 0.69] and set(result["paper_table2"]) <= set(table)
    assert set(result["paper_table2_std"]) == set(result["paper_table2"])
    masks = [torch.load(tmp_path / "run" / "seed0" / f"masks_{op}_step4.pt") for op in ("add", "mul")]
    for kind in masks[0]:
        a, m = masks[0][kind], masks[1][kind]
        both, either = int((a & m).sum()), int((a | m).sum())
        cell = run["overlap"][kind]
        assert cell["n_add"] == int(a.sum()) and cell["n_mul"] == int(m.sum())
        assert cell["iou"] == pytest.approx(both / max(either, 1))
        assert cell["iomin"] == pytest.approx(both / max(min(int(a.sum()), int(m.sum())), 1))
    # a run directory of the double-addition script is not resumed here (other experiment)
    record = json.loads((tmp_path / "run" / "run_settings.json").read_text())
    assert record["experiment"] == "add_mul"
    double = tmp_path / "double"
    double.mkdir()
    (double / "run_settings.json").write_text(json.dumps({**record, "experiment": "double_addition"}))
    monkeypatch.setattr(sys, "argv", ["x", "--run_dir", str(double), "--train_size", "400", "--valid_size", "200",
                                      "--hidden", "8", "--base_steps", "5", "--mask_steps", "4", "--eval_every", "2"])
    with pytest.raises(SystemExit, match=r"'experiment': \('double_addition', 'add_mul'\)"):
        add_mul.main()
