"""`bench_edges.py --merge`: seeds run as separate processes (one `--output` each, e.g. on a GPU) are joined into one
file whose summary is the one a single process over all seeds writes; files of other settings, repeated seeds and
unfinished runs are refused."""

from __future__ import annotations

import json
from types import ModuleType

import pytest
from benchmark_scripts import load_script


@pytest.fixture(scope="module")
def edges() -> ModuleType:
    return load_script("quality/bench_edges")


SETTINGS = {"steps": 4, "batch_size": 8, "eval_examples": 8, "node_target": 0.5, "edge_target": 0.9,
            "ablation": "resample"}


def _part(seed: int, cpr: float, settings: dict = SETTINGS, curves: bool = True) -> dict:
    runs, curve = {}, {}
    for level, factor in (("node", 1.0), ("edge", 2.0)):
        key = f"{level}/seed{seed}"
        runs[key] = {"seconds_per_step": factor * (seed + 1), "peak_rss_mb": 100.0 * factor, "peak_cuda_mb": None,
                     "logits": {}}
        curve[key] = {"cpr": factor * cpr, "cmd": 1 - cpr, "edge_share_for_f": 0.1 * factor,
                      "edge_share": [0.01, 0.1, 0.5, 1.0], "faithfulness": [0.1, 0.3, 0.9 if level == "edge" else 0.5, 1.0]}
    part = {"settings": settings, "runs": runs, "machine": {"device": "cpu"}}
    if curves:
        part["curves"] = curve
    return part


def _write(tmp_path, name: str, part: dict) -> str:
    path = tmp_path / name
    path.write_text(json.dumps(part))
    return str(path)


def test_merge_joins_seeds_and_summarizes_them_as_one_process_would(edges, tmp_path):
    files = [_write(tmp_path, f"s{seed}.json", _part(seed, cpr)) for seed, cpr in ((0, 0.2), (1, 0.4), (2, 0.3))]
    output = tmp_path / "merged.json"
    joined = edges.merge(files, str(output))
    assert json.loads(output.read_text()) == json.loads(json.dumps(joined))
    assert sorted(joined["runs"]) == sorted(f"{level}/seed{s}" for level in ("node", "edge") for s in range(3))
    node, edge = joined["summary"]["node"], joined["summary"]["edge"]
    assert node["seeds"] == edge["seeds"] == 3
    assert node["cpr_mean"] == pytest.approx(0.3) and edge["cpr_mean"] == pytest.approx(0.6)
    assert node["cmd_mean"] == pytest.approx(0.7)
    assert node["seconds_per_step"] == [1.0, 2.0, 3.0] and edge["peak_rss_mb"] == [200.0] * 3
    assert edge["f_reached_below_full"] == [True] * 3 and node["f_reached_below_full"] == [False] * 3
    # the same summary as one file holding every seed
    single = {"runs": joined["runs"], "curves": joined["curves"]}
    assert edges.summarize(single) == joined["summary"]
    assert joined["merged_from"] == files and joined["settings"] == SETTINGS


def test_merge_refuses_other_settings_repeated_seeds_and_unfinished_runs(edges, tmp_path):
    first = _write(tmp_path, "a.json", _part(0, 0.2))
    other = _write(tmp_path, "b.json", _part(1, 0.2, settings={**SETTINGS, "steps": 5}))
    with pytest.raises(SystemExit, match="other settings"):
        edges.merge([first, other], str(tmp_path / "m.json"))
    again = _write(tmp_path, "c.json", _part(0, 0.5))
    with pytest.raises(SystemExit, match=r"repeats \['edge/seed0', 'node/seed0'\]"):
        edges.merge([first, again], str(tmp_path / "m.json"))
    unfinished = _write(tmp_path, "d.json", _part(1, 0.2, curves=False))
    with pytest.raises(SystemExit, match="has no curves"):
        edges.merge([first, unfinished], str(tmp_path / "m.json"))
    assert not (tmp_path / "m.json").exists()


def test_a_threshold_met_only_by_the_full_model_is_flagged(edges):
    """f = 1 at the full model by definition: an interpolated crossing on the segment that ends there is not a
    circuit's size."""
    shares, below = [0.01, 0.1, 0.5, 1.0], [0.1, 0.2, 0.6, 1.0]
    assert edges.share_reaching(shares, below, 0.8) == pytest.approx(0.5 + 0.5 * (0.8 - 0.6) / 0.4)
    assert not edges.reached_below_full(shares, below, 0.8)
    assert edges.reached_below_full(shares, [0.1, 0.85, 0.9, 1.0], 0.8)
