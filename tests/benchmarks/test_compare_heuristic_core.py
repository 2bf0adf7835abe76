"""`compare_heuristic_core.py`: the default study beside the Heuristic Core paper's released numbers.

The pure functions are checked on hand-made tables with hand-computed answers; one run on the real files (the
paper's released tables, skipped without them, and the committed `docs/study_default`) checks numbers recomputed here
straight from those files. The real run is the slow part (importing matplotlib and the library's evaluation
package, drawing the figure): 14 s on a loaded 2-core machine."""

from __future__ import annotations

import json
import math
import shutil
import statistics
from pathlib import Path
from types import ModuleType

import pytest

from benchmark_scripts import ROOT, load_script

PAPER_DIR = ROOT.parent / "shared" / "data" / "heuristic-core-eval"
STUDY_DIR = ROOT / "docs" / "study_default"
SO, PREP, IF, VERB = ("lexical_overlap_ln_subject-object_swap", "lexical_overlap_ln_preposition",
                      "constituent_cn_embedded_under_if", "constituent_cn_embedded_under_verb")


@pytest.fixture(scope="module")
def hc() -> ModuleType:
    return load_script("reproductions/compare_heuristic_core")


# ------------------------------------------------------------------------------------------------ pure functions


def test_mean_over_and_seed_stats(hc: ModuleType) -> None:
    assert hc.mean_over({"a": 0.2, "b": 0.6, "c": 1.0}, ["a", "b"]) == pytest.approx(0.4)
    with pytest.raises(KeyError, match=r"\['z'\] not in the row"):
        hc.mean_over({"a": 0.2}, ["a", "z"])
    stats = hc.seed_stats([0.2, 0.4, 0.9])
    # mean 0.5; deviations -0.3, -0.1, +0.4 -> population variance 0.26 / 3
    assert stats == pytest.approx({"mean": 0.5, "std": math.sqrt(0.26 / 3), "min": 0.2, "max": 0.9, "n": 3})
    assert hc.seed_stats([0.7])["std"] == 0.0
    with pytest.raises(ValueError, match="no values"):
        hc.seed_stats([])


def test_curve_over_finetuning_orders_steps_as_numbers(hc: ModuleType) -> None:
    """String keys "100" < "20" as text; the curve must follow the step numbers."""
    table = {"100": {"a": 0.5, "b": 0.1}, "20": {"a": 0.4, "b": 0.0}, "300": {"a": 0.6, "b": 0.5}}
    curve = hc.curve_over_finetuning(table, {"id": ["a"], "ood": ["a", "b"]})
    assert curve["steps"] == [20, 100, 300]
    assert curve["fraction"] == pytest.approx([20 / 300, 100 / 300, 1.0])
    assert curve["id"] == pytest.approx([0.4, 0.5, 0.6])
    assert curve["ood"] == pytest.approx([0.2, 0.3, 0.55])


def test_first_fraction_reaching(hc: ModuleType) -> None:
    xs = [0.25, 0.5, 0.75, 1.0]
    assert hc.first_fraction_reaching(xs, [0.1, 0.5, 0.95, 1.0]) == 0.75      # 0.9 x 1.0 first reached at 0.75
    assert hc.first_fraction_reaching(xs, [0.1, 0.5, 0.89, 1.0]) == 1.0
    assert hc.first_fraction_reaching(xs, [0.9, 0.5, 0.5, 0.5]) == 0.25       # falling: 0.45 already at the start
    assert hc.first_fraction_reaching(xs, [0.2, 0.1, 0.0, 0.0]) is None       # ends at 0: never learned
    assert hc.first_fraction_reaching(xs, [0.0, 0.4, 0.5, 0.8], share=0.5) == 0.5


def test_accuracy_vs_sparsity_skips_seeds_missing_a_case(hc: ModuleType) -> None:
    table = {
        "1": {"10": {"a": 0.9, "b": 0.5}, "50": {"a": 0.8, "b": 0.1}},
        "2": {"10": {"a": 0.7, "b": 0.3}, "50": {"a": 0.6}},            # b left out at 50%
    }
    curve = hc.accuracy_vs_sparsity(table, {"id": ["a"], "both": ["a", "b"]}, percent=True)
    assert sorted(curve) == [0.1, 0.5]
    assert curve[0.1]["id"] == pytest.approx({"mean": 0.8, "std": 0.1, "min": 0.7, "max": 0.9, "n": 2})
    assert curve[0.1]["both"]["mean"] == pytest.approx((0.7 + 0.5) / 2)    # seed means 0.7 and 0.5
    assert curve[0.5]["id"]["n"] == 2 and curve[0.5]["id"]["mean"] == pytest.approx(0.7)
    assert curve[0.5]["both"] == pytest.approx({"mean": 0.45, "std": 0.0, "min": 0.45, "max": 0.45, "n": 1})
    # fraction keys (the study's) read as they are
    assert sorted(hc.accuracy_vs_sparsity({"0": {"0.4": {"a": 1.0}}}, {"id": ["a"]}, percent=False)) == [0.4]


def test_faithful_and_first_drop(hc: ModuleType) -> None:
    curve = {0.0: {"g": {"mean": 0.80}}, 0.1: {"g": {"mean": 0.78}}, 0.2: {"g": {"mean": 0.76}},
             0.3: {"g": {"mean": 0.79}}, 0.4: {"g": {"mean": 0.70}}}
    # full 0.80, margin 0.03: faithful when mean > 0.77 -> 0.0, 0.1, 0.3; the first at or below 0.77 is 0.2
    assert hc.highest_faithful_sparsity(curve, "g", 0.80) == 0.3
    assert hc.first_sparsity_below(curve, "g", 0.80) == 0.2
    assert hc.first_sparsity_below(curve, "g", 0.72) is None               # nothing at or below 0.69
    assert hc.highest_faithful_sparsity(curve, "g", 0.95) == 0.0           # none faithful: the full model
    assert hc.highest_faithful_sparsity(curve, "other", 0.80) == 0.0


def test_multiseed_table_and_group(hc: ModuleType) -> None:
    table = {"seed": ["original", "42", "43"], "sparsity": [0.0, 0.5, 0.4872],
             "mnli-matched": [0.83, 0.81, 0.80], SO: [0.9, 0.1, 0.3]}
    stats = hc.multiseed_table(table)
    assert stats["seeds"] == ["42", "43"]
    assert stats["full"] == {"mnli-matched": 0.83, SO: 0.9}
    assert stats["pruned"][SO] == pytest.approx({"mean": 0.2, "std": 0.1, "min": 0.1, "max": 0.3, "n": 2})
    assert stats["realized_sparsity"]["mean"] == pytest.approx((0.5 + 0.4872) / 2)
    group = hc.group_over_seeds(table, ["mnli-matched", SO])
    assert group["full"] == pytest.approx(0.865)
    assert group["pruned"]["mean"] == pytest.approx(((0.81 + 0.1) / 2 + (0.80 + 0.3) / 2) / 2)
    with pytest.raises(ValueError, match="first column must be the full model"):
        hc.multiseed_table({"seed": ["42"], "sparsity": [0.5], SO: [0.1]})


def test_paper_kept_heads_and_chance(hc: ModuleType) -> None:
    # 0.7115 x 156 = 110.99 -> 111 units pruned, all heads (no MLP pruned) -> 33 of 144 kept; 0.5 -> 78 -> 66 kept
    assert hc.paper_kept_heads([0.7115, 0.5]) == [33, 66]
    with pytest.raises(ValueError, match="not a whole number of units"):
        hc.paper_kept_heads([0.501])
    # the paper's own chance figure: 144 x 0.3^12 = 7.7e-5
    assert hc.chance_core_size(144, 0.7, 12) == pytest.approx(7.7e-5, rel=0.01)
    # the study's report: 72 heads, head sparsity 55/72, 4 seeds -> 0.2238
    assert hc.chance_core_size(72, 55 / 72, 4) == pytest.approx(72 * (17 / 72) ** 4)
    assert hc.drop(0.9, 0.85) == pytest.approx(0.05)


def _side(reach: tuple[float, float], faithful: tuple[float, float], ood50: float, ood70: float,
          size_ood: tuple[float, float], size_id: tuple[float, float]) -> dict:
    """A minimal side with only what `findings` reads."""
    cell = {"id_drop": 0.01, "ood_drop": ood50, "id_cases": ["id"], "mlps_kept_by_all": 6,
            "ood": {"pruned": {"std": 0.05}},
            "cases": {"id": {"min": 0.95, "max": 0.96}, SO: {"min": 0.1, "max": 0.5}, PREP: {"min": 0, "max": 0},
                      IF: {"min": 0, "max": 0}, VERB: {"min": 0, "max": 0}}}
    return {"reach_fraction": {"id": reach[0], "ood": reach[1]},
            "highest_faithful_sparsity": {"id": faithful[0], "ood": faithful[1]},
            "multiseed": {"sp50": cell, "sp70": {**cell, "ood_drop": ood70}},
            "effective_size": {"ood": list(size_ood), "id": list(size_id)},
            "chance_core_size_all_subnetworks": 1e-3,
            "core_all_subnetworks": {"size": 2, "chance_size": 0.5}, "model": {"layers": 6}}


def test_spreads_on_a_hand_made_side(hc: ModuleType) -> None:
    side = _side((0.1, 0.8), (0.5, 0.25), 0.40, 0.55, (0.3, 0.77), (0.5, 0.48))
    spread = hc.spreads(side)
    assert spread["id_range_50"] == pytest.approx(0.01)                    # 0.95-0.96
    assert spread["widest_ood_case_50"] == pytest.approx(
        {"case": SO, "name": "SO-Swap", "range": 0.4, "min": 0.1, "max": 0.5})
    assert spread["ood_extra_drop_70"] == pytest.approx(0.15)
    assert spread["ood_seed_std"] == 0.05


def test_findings_on_hand_made_sides(hc: ModuleType) -> None:
    paper = _side((0.1, 0.8), (0.5, 0.25), 0.4, 0.55, (0.3, 0.77), (0.5, 0.48))
    # the reverse of every claim: OOD learned first, falls later, 70% no worse, sizes fall, ID size moves, core 2 < 5
    ours = _side((0.8, 0.2), (0.3, 0.5), 0.4, 0.1, (0.7, 0.3), (0.3, 0.6))
    ours["multiseed"]["sp50"]["cases"][SO] = {"min": 0.4, "max": 0.41}      # OOD spread 0.01 < 3 x ID spread 0.01
    result = hc.findings(paper, ours)
    assert {name: v["paper"] for name, v in result.items()} == {name: True for name in result}
    assert {name: v["ours"] for name, v in result.items() if name != "every_mlp_kept"} == {
        name: False for name in result if name != "every_mlp_kept"}
    assert result["every_mlp_kept"]["ours"] is True
    ours["multiseed"]["sp70"]["mlps_kept_by_all"] = 5
    assert hc.findings(paper, ours)["every_mlp_kept"]["ours"] is False
    # 70% worse than 50% by less than the seeds' spread (0.04 < std 0.05) is not "sparser generalizes worse"
    assert hc.findings(_side((0.1, 0.8), (0.5, 0.25), 0.40, 0.44, (0.3, 0.77), (0.5, 0.48)), ours)[
        "sparser_subnetworks_generalize_worse"]["paper"] is False
    # the rise and flat thresholds are inclusive at their settings
    edge = _side((0.1, 0.8), (0.5, 0.25), 0.4, 0.55, (0.3, 0.3 + hc.RISE), (0.5, 0.5 + hc.FLAT))
    assert hc.findings(edge, edge)["ood_effective_size_rises"]["ours"] is True
    assert hc.findings(edge, edge)["id_effective_size_flat"]["ours"] is True


# ------------------------------------------------------------------------------------------------ errors


def test_missing_paper_folder_names_path_and_fix(hc: ModuleType, tmp_path: Path, capsys) -> None:
    code = hc.main(["--paper_dir", str(tmp_path / "nowhere"), "--study_dir", str(STUDY_DIR),
                    "--output", str(tmp_path / "out.json"), "--figure", str(tmp_path / "fig.png")])
    err = capsys.readouterr().err
    assert code == 2
    assert str(tmp_path / "nowhere" / "mnli-acc_over_ft.json") in err and "--paper_dir" in err
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "fig.png").exists()


def test_missing_study_file_names_path_and_fix(hc: ModuleType, tmp_path: Path) -> None:
    study = tmp_path / "study"
    study.mkdir()
    shutil.copy(STUDY_DIR / "report.json", study / "report.json")          # finetune/effective_size.json missing
    with pytest.raises(hc.InputError, match=r"effective_size\.json.*--study_dir.*hf-heuristic-core study"):
        hc.study_side(study)


def test_study_without_the_papers_subcases_is_refused(hc: ModuleType, tmp_path: Path) -> None:
    study = tmp_path / "study"
    (study / "finetune").mkdir(parents=True)
    report = json.loads((STUDY_DIR / "report.json").read_text())
    report["study"]["groups"]["ood"] = [c for c in report["study"]["groups"]["ood"] if c != IF]
    (study / "report.json").write_text(json.dumps(report))
    shutil.copy(STUDY_DIR / "finetune" / "effective_size.json", study / "finetune" / "effective_size.json")
    with pytest.raises(hc.InputError, match=r"no OOD subcase\(s\) \['constituent_cn_embedded_under_if'\]"):
        hc.study_side(study)


def test_malformed_json_is_named(hc: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(hc.InputError, match=r"bad\.json is not valid JSON"):
        hc._read_json(tmp_path / "bad.json")


# ------------------------------------------------------------------------------------------------ the real files


@pytest.fixture(scope="module")
def real_run(hc: ModuleType, tmp_path_factory) -> tuple[dict, Path]:
    if not PAPER_DIR.is_dir():
        pytest.skip(f"the paper's released tables are not at {PAPER_DIR} (the shared data folder is absent)")
    out = tmp_path_factory.mktemp("hc")
    figure = out / "figures" / "side.png"
    assert hc.main(["--paper_dir", str(PAPER_DIR), "--study_dir", str(STUDY_DIR), "--output",
                    str(out / "result.json"), "--figure", str(figure)]) == 0
    return json.loads((out / "result.json").read_text()), figure


def _paper(name: str):
    return json.loads((PAPER_DIR / name).read_text())


def test_real_paper_numbers_recomputed(real_run: tuple[dict, Path]) -> None:
    result, _ = real_run
    paper = result["paper"]
    sp50 = _paper("mnli-sp50.json")
    assert sp50["seed"][0] == "original"
    cell = paper["multiseed"]["sp50"]["cases"]["mnli-matched"]
    assert cell["mean"] == pytest.approx(sum(sp50["mnli-matched"][1:]) / 12)
    assert cell["full"] == sp50["mnli-matched"][0]
    assert paper["multiseed"]["sp50"]["cases"][IF]["min"] == pytest.approx(0.041)   # the paper's "4.1% to 50.2%"
    assert paper["multiseed"]["sp50"]["cases"][IF]["max"] == pytest.approx(0.502)
    sp70 = _paper("mnli-sp70.json")
    kept = [144 - round(s * 156) for s in sp70["sparsity"][1:]]
    assert paper["multiseed"]["sp70"]["kept_heads"]["mean"] == pytest.approx(sum(kept) / 12)

    avs = _paper("mnli-acc_vs_sparsity.json")
    ood50 = [sum(avs[seed]["50"][c] for c in (SO, PREP, IF, VERB)) / 4 for seed in avs]
    assert paper["accuracy_vs_sparsity"]["0.5"]["ood"]["mean"] == pytest.approx(sum(ood50) / len(ood50))
    assert paper["accuracy_vs_sparsity"]["0.5"]["ood"]["n"] == 3

    over_ft = _paper("mnli-acc_over_ft.json")
    steps = sorted(over_ft, key=int)
    id_curve = [(over_ft[s]["validation_matched"] + over_ft[s]["validation_mismatched"]) / 2 for s in steps]
    first = next(s for s, v in zip(steps, id_curve) if v >= 0.9 * id_curve[-1])
    assert paper["reach_fraction"]["id"] == pytest.approx(int(first) / int(steps[-1]))
    assert paper["reach_fraction"]["id"] < paper["reach_fraction"]["ood"]
    # effective size from the released grid (the guide's numbers: 0.30 at step 500, 0.77 at step 54,500)
    assert paper["effective_size"]["ood"][0] == pytest.approx(0.30)
    assert paper["effective_size"]["ood"][-1] == pytest.approx(0.7667, abs=1e-3)
    # seed-mean curve: ID faithful up to 50% (81.4 > 83.8 - 3), OOD up to 25% (55.6 > 56.7 - 3, 50.3 is not)
    assert paper["highest_faithful_sparsity"] == {"id": 0.5, "ood": 0.25}


def test_real_study_numbers_recomputed(real_run: tuple[dict, Path]) -> None:
    result, _ = real_run
    ours = result["ours"]
    report = json.loads((STUDY_DIR / "report.json").read_text())["analysis"]
    tracking = json.loads((STUDY_DIR / "finetune" / "effective_size.json").read_text())
    # the study's own OOD group accuracy (computed by the library) against the mean over its cases here
    assert ours["over_finetuning"]["ood_all"][-1] == pytest.approx(tracking["checkpoints"][-1]
                                                                   ["full_accuracy_by_group"]["ood"])
    rows70 = [r for r in report["results"] if r["sparsity"] == 0.7]
    assert ours["multiseed"]["sp70"]["cases"][VERB]["mean"] == pytest.approx(statistics.fmean(r[VERB] for r in rows70))
    assert ours["multiseed"]["sp70"]["core_size"] == 5
    assert ours["multiseed"]["sp70"]["kept_heads_mean"] == pytest.approx(72 * (1 - 0.7638888888888888))
    assert ours["core_all_subnetworks"]["heads"] == ["L1.H1", "L1.H2", "L2.H9", "L3.H9", "L4.H2"]
    assert ours["effective_size"]["ood"] == pytest.approx([c["effective_size"]["ood"] for c in tracking["checkpoints"]])
    assert result["core_share_of_kept_heads_70"]["ours"] == pytest.approx(5 / 17)
    # 70% loses only ~1 point more OOD accuracy than 50% on the 4 shared subcases: less than the seeds' spread
    full_ood = statistics.fmean(report["full_model"][c] for c in (SO, PREP, IF, VERB))
    ood = {sp: [statistics.fmean(r[c] for c in (SO, PREP, IF, VERB)) for r in report["results"] if r["sparsity"] == sp]
           for sp in (0.5, 0.7)}
    extra = (full_ood - statistics.fmean(ood[0.7])) - (full_ood - statistics.fmean(ood[0.5]))
    assert 0 < extra < max(statistics.pstdev(ood[0.5]), statistics.pstdev(ood[0.7]))
    assert result["findings"]["sparser_subnetworks_generalize_worse"] == {"paper": True, "ours": False}


def test_released_subcase_curves_stay_out_of_the_json(hc: ModuleType, real_run: tuple[dict, Path]) -> None:
    """The single-subcase curves over fine-tuning are the released values themselves: drawn, never written."""
    result, _ = real_run
    assert hc.FIGURE_ONLY not in result["paper"] and "SO-Swap" not in result["paper"]["over_finetuning"]
    assert set(result["paper"]["over_finetuning"]) == {"steps", "fraction", "id", "ood"}
    assert "SO-Swap" in result["ours"]["over_finetuning"]                  # the study's own numbers stay


def test_real_figure_written_whole(real_run: tuple[dict, Path]) -> None:
    _, figure = real_run
    assert figure.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in figure.parent.iterdir()] == [figure.name]      # no temp file left beside it
