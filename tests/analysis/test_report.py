"""analyze() on hand-made runs folders (numbers checked by hand), the analyze CLI, and prune_many + analyze end to
end on the fine-tuned MiniLM."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import datasets
import numpy as np
import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningConfig, read_artifact
from hf_heuristic_core.analysis import ablation_table, run_name, write_json
from hf_heuristic_core.cli.analyze import _split_groups, analyze_command, parse_analyze_args
from hf_heuristic_core.analysis.report import analyze
from hf_heuristic_core.analysis.report_settings import AnalyzeSettings
from tiny_models import one_torch_thread, tiny_model  # noqa: F401

pytest.importorskip("matplotlib")
pytestmark = pytest.mark.usefixtures("one_torch_thread")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

# Hand-made masks of a 2-layer, 4-head model: {(sparsity, seed): (heads, mlps)}.
MASKS = {
    (0.5, 0): ([[1, 1, 0, 0], [1, 0, 1, 0]], [1, 0]),
    (0.5, 1): ([[1, 0, 1, 0], [1, 1, 0, 0]], [1, 1]),
    (0.5, 2): ([[1, 1, 0, 0], [0, 0, 1, 1]], [1, 0]),
    (0.7, 0): ([[1, 0, 0, 0], [1, 0, 0, 0]], [1, 1]),
    (0.7, 1): ([[1, 0, 0, 0], [0, 0, 1, 0]], [1, 0]),
    (0.7, 2): ([[1, 1, 0, 0], [0, 0, 0, 0]], [1, 1]),
}
ACCURACY = {(0.5, 0): (0.8, 0.2), (0.5, 1): (0.7, 0.5), (0.5, 2): (0.9, 0.1),
            (0.7, 0): (0.6, 0.0), (0.7, 1): (0.65, 0.05), (0.7, 2): (0.55, 0.1)}
FULL = {"id": 0.85, "ood": 0.4}


def _pair_rows(n: int, seed: int) -> list[dict]:
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        a = torch.randint(5, 60, (3,), generator=generator).tolist()
        b = [a[0], *torch.randint(5, 60, (2,), generator=generator).tolist()]
        ids = [1, *a, 2, *b, 2]
        rows.append({"input_ids": ids, "token_type_ids": [0] * 5 + [1] * 4, "attention_mask": [1] * 9,
                     "label": int(torch.randint(0, 3, (1,), generator=generator))})
    return rows


@pytest.fixture
def runs_dir(tmp_path) -> Path:
    """A runs folder as prune_many leaves it, with the masks above saved by a tiny BERT (means included)."""
    runs = tmp_path / "runs"
    model = PrunableModel(tiny_model("bert"), PruningConfig())
    model.compute_means(datasets.Dataset.from_list(_pair_rows(16, 0)), show_progress=False)
    for (sparsity, seed), (heads, mlps) in MASKS.items():
        folder = runs / run_name(sparsity, seed)
        model.set_masks(heads=torch.tensor(heads), mlps=torch.tensor(mlps))
        model.save_pretrained(folder)
        id_acc, ood_acc = ACCURACY[(sparsity, seed)]
        kept = sum(map(sum, heads)) + sum(mlps)
        write_json(folder / "result.json", {
            "run": folder.name, "sparsity": sparsity, "seed": seed, "realized_sparsity": 1 - kept / 10,
            "units_kept": kept, "units_total": 10,
            "eval": {"id": {"accuracy": id_acc, "agreement": 0.9, "kl": 0.1, "num_examples": 20},
                     "ood": {"accuracy": ood_acc, "agreement": 0.8, "kl": 0.2, "num_examples": 20}}})
    write_json(runs / "full_model.json", {"accuracy": FULL, "num_examples": {"id": 20, "ood": 20}})
    write_json(runs / "manifest.json", {"model": None, "eval_sets": ["id", "ood"], "sparsities": [0.5, 0.7],
                                        "seeds": [0, 1, 2]})
    return runs


def _assert_figure(folder: Path, stem: str) -> None:
    png, pdf = folder / f"{stem}.png", folder / f"{stem}.pdf"
    assert png.read_bytes()[:8] == PNG_MAGIC and pdf.read_bytes()[:5] == b"%PDF-", stem


def test_mask_statistics_and_tables_by_hand(runs_dir):
    from scipy.stats import spearmanr
    report = analyze(runs_dir)          # the manifest names no model: the model sections are skipped
    stats = report["mask_statistics"]
    at50, at70 = stats["per_sparsity"]["sp50"], stats["per_sparsity"]["sp70"]
    assert at50["head_frequency"] == [[3, 2, 1, 0], [2, 1, 2, 1]] and at50["mlp_frequency"] == [3, 1]
    assert at70["head_frequency"] == [[3, 1, 0, 0], [1, 0, 1, 0]] and at70["mlp_frequency"] == [3, 2]
    assert at50["core"]["heads"] == ["L0.H0"] and at50["core"]["mlps"] == ["L0.MLP"]
    assert at70["core"]["mlps"] == ["L0.MLP"]
    assert at50["core"]["chance_size"] == pytest.approx(8 * 0.5 ** 3)        # N (1 - s)^k, s = 4/8 pruned
    assert at70["core"]["chance_size"] == pytest.approx(8 * 0.25 ** 3)       # s = 6/8 pruned
    assert at70["core"]["head_sparsity"] == pytest.approx(0.75)
    iou_pairs = [1 / 3, 3 / 5, 1 / 7]                                          # seeds (0,1), (0,2), (1,2)
    iomin_pairs = [2 / 4, 3 / 4, 1 / 4]
    assert at50["overlap"]["num_pairs"] == 3
    assert at50["overlap"]["iou"]["mean"] == pytest.approx(np.mean(iou_pairs))
    assert at50["overlap"]["iou"]["std"] == pytest.approx(np.std(iou_pairs))
    assert at50["overlap"]["iou"]["min"] == pytest.approx(1 / 7)
    assert at50["overlap"]["iomin"]["mean"] == pytest.approx(0.5)
    assert at50["overlap"]["iomin"]["max"] == pytest.approx(iomin_pairs[1])
    (pair,) = stats["spearman"]
    expected = spearmanr([3, 2, 1, 0, 2, 1, 2, 1], [3, 1, 0, 0, 1, 0, 1, 0])
    assert pair["rho"] == pytest.approx(expected.statistic) and pair["p_value"] == pytest.approx(expected.pvalue)
    joint = np.zeros((4, 4), dtype=int)
    joint[3, 3], joint[2, 1], joint[1, 0], joint[0, 0] = 1, 3, 3, 1
    assert pair["joint_frequency"] == joint.tolist()

    summary = {(r["sparsity"], r["eval_set"]): r for r in report["summary"]}
    ood50 = summary[(0.5, "ood")]
    assert (ood50["min"], ood50["max"], ood50["full_model"]) == (0.1, 0.5, 0.4)
    assert ood50["mean"] == pytest.approx(0.8 / 3) and ood50["std"] == pytest.approx(np.std([0.2, 0.5, 0.1]))
    assert report["core_sparsity"] == 0.7 and report["core_units"] == ["L0.H0", "L0.MLP"]
    assert "names no model" in report["ablation"]["skipped"]
    assert "names no model" in report["attention"]["skipped"]

    folder = runs_dir / "report"
    for stem in ("mask_grid_sp50", "mask_grid_sp70", "joint_frequency_sp50_sp70", "accuracy_vs_sparsity",
                 "subnetwork_accuracies"):
        _assert_figure(folder, stem)
        assert report["figures"][stem] == f"{stem}.png"
    assert json.loads((folder / "report.json").read_text())["mask_statistics"] == json.loads(json.dumps(stats))
    markdown = (folder / "report.md").read_text()
    assert "| 50% | id | 85.0 | 70.0 | 90.0 | 80.0 | 8.2 | 3 |" in markdown
    assert "| 70% | 3 | 8 | 0.750 | 1 | 0.125 | L0.H0 | L0.MLP |" in markdown
    assert f"| 50% | 70% | {expected.statistic:.3f} |" in markdown
    assert "| L1 | 2 | 1 | 2 | 1 | 1 |" in markdown                              # head frequency + MLP column
    assert "![head frequency at 50%](mask_grid_sp50.png)" in markdown
    assert "## Ablation table\n\nSkipped: manifest.json names no model" in markdown
    assert "## Control subnetworks" not in markdown                            # none were run


def test_model_sections_with_a_tiny_model(runs_dir):
    """Ablation and attention from a passed model, tokenizer and evaluation sets; means come from the artifacts."""
    sets = {"id": datasets.Dataset.from_list(_pair_rows(24, 1)), "ood": datasets.Dataset.from_list(_pair_rows(24, 2))}
    tokenizer = SimpleNamespace(all_special_ids=[0, 1, 2], sep_token_id=2,
                                convert_ids_to_tokens=lambda ids: [f"t{i}" for i in ids])
    model = PrunableModel(tiny_model("bert", attn_implementation="sdpa"), PruningConfig())
    report = analyze(runs_dir, model=model, tokenizer=tokenizer, eval_sets=sets, non_core_sample=3, heatmaps=1,
                     attention_examples=10, show_progress=False)
    means = read_artifact(runs_dir / "sp50-seed0").tensors["means.heads"]
    assert torch.equal(model.get_means()["heads"], means)
    reference = PrunableModel(tiny_model("bert"), PruningConfig())
    reference.set_means(means, read_artifact(runs_dir / "sp50-seed0").tensors["means.mlps"])
    expected = ablation_table(reference, sets, ["L0.H0", "L0.MLP"], non_core_sample=3, show_progress=False)
    assert report["ablation"] == json.loads(json.dumps(expected.to_dict()))
    assert [r["label"] for r in report["ablation"]["rows"]] == ["L0.H0", "L0.MLP", "L0.H0 + L0.MLP",
                                                                 "average non-core head (n=3)"]
    attention = report["attention"]
    assert attention["eval_set"] == "ood" and attention["num_examples"] == 10 and attention["num_queries"] == 90
    assert [r["head"] for r in attention["rows"]] == ["L0.H0", "mean of 7 other heads"]
    assert model.model.config._attn_implementation == "sdpa"
    folder = runs_dir / "report"
    for stem in ("ablation_table", "attention-L0.H0"):
        _assert_figure(folder, stem)
    markdown = (folder / "report.md").read_text()
    assert "| L0.H0 + L0.MLP |" in markdown and "| uniform attention |" in markdown
    assert "sum of the 2 single changes" in markdown


def test_analyze_cli(runs_dir, tmp_path, capsys):
    out = tmp_path / "elsewhere"
    assert analyze_command([str(runs_dir), "--no-ablation", "--no_attention", "--output_dir", str(out)]) == 0
    assert (out / "report.md").is_file() and (out / "report.json").is_file()
    _assert_figure(out, "accuracy_vs_sparsity")
    printed = capsys.readouterr().out
    assert f"Report: {out / 'report.md'}" in printed and "6 subnetworks" in printed
    assert "ablation" not in json.loads((out / "report.json").read_text())

    args = parse_analyze_args(["runs", "--joint", "L0.H0+L1.H1; L0.MLP", "--ablation_units", "L0.H0,L1.H2",
                               "--max-core-units", "2", "--core_sparsity", "0.7"])
    assert args.runs_dir == "runs" and args.max_core_units == 2 and args.core_sparsity == 0.7
    assert _split_groups(args.joint) == [["L0.H0", "L1.H1"], ["L0.MLP"]]
    with pytest.raises(SystemExit):
        parse_analyze_args(["--no_ablation"])


def test_mask_statistics_when_mlps_were_not_pruned():
    from hf_heuristic_core.analysis.report import mask_statistics
    runs = [{"seed": s, "heads": torch.tensor(MASKS[(0.5, s)][0]), "mlps": torch.ones(2, dtype=torch.long),
             "prune_mlps": False} for s in (0, 1)]
    stats = mask_statistics({0.5: runs})
    entry = stats["per_sparsity"]["sp50"]
    assert entry["core"]["mlps"] is None and entry["core"]["heads"] == ["L0.H0", "L1.H0"]
    assert entry["mlp_frequency"] == [2, 2] and stats["spearman"] == []
    assert entry["overlap"]["iou"]["mean"] == pytest.approx(1 / 3)


def test_analyze_rejects_an_unknown_core_sparsity(runs_dir):
    with pytest.raises(ValueError, match="not among"):
        analyze(runs_dir, ablation=False, attention=False, core_sparsity=0.3)


def test_analyze_needs_finished_runs(tmp_path):
    with pytest.raises(FileNotFoundError, match="no finished runs"):
        analyze(tmp_path)


# ------------------------------------------------------------------------------------------------ real model
@pytest.mark.slow
def test_prune_many_and_analyze_on_finetuned_minilm(finetuned_minilm, nli_data, tmp_path):
    import transformers
    from hf_heuristic_core.analysis import datasets_from_spec, prune_many, tokenize_pairs
    from conftest import MAX_LENGTH
    tokenizer = transformers.AutoTokenizer.from_pretrained(finetuned_minilm)
    generated = dict(train_size=1024, id_eval_size=256, ood_eval_size_per_subcase=20, seed=0)   # = nli_data
    entry = {"source": "generate_nli", "kwargs": generated}
    spec = {"text_columns": ["premise", "hypothesis"], "max_length": MAX_LENGTH,
            "train": {**entry, "split": "train", "limit": 256},
            "eval_sets": {"id_eval": {**entry, "split": "id_eval", "limit": 64},
                          "ood_eval": {**entry, "split": "ood_eval", "limit": 60},
                          "SO-Swap": {**entry, "split": "ood_eval", "subcases": ["SO-Swap"]}}}
    train, eval_sets = datasets_from_spec(spec, tokenizer)
    assert train["input_ids"] == tokenize_pairs(nli_data["train"].select(range(256)), tokenizer,
                                                max_length=MAX_LENGTH)["input_ids"]
    runs = tmp_path / "runs"
    # 20 steps per run: what is checked is how the files, tables and figures agree, not how good the masks are (the
    # optimisation on real weights is tests/test_real_models.py's); top-k binarization fixes the sizes either way
    overrides = dict(max_steps=20, warmup_steps=2, sparsity_warmup_steps=10, per_device_train_batch_size=8,
                     teacher="cached", sparsity_penalty="expected", reg_learning_rate=0.1, use_cpu=True)
    result = prune_many(str(finetuned_minilm), train, eval_sets, runs, [0.5, 0.7], [0, 1],
                        pruning_config=PruningConfig(init_mean=3.0), pruning_overrides=overrides, tokenizer=tokenizer,
                        means_examples=64, data_spec=spec, show_progress=False)
    assert len(result.results) == 4 and len(result.controls) == 6
    assert {r["units_kept"] for r in result.results} == {78 - 39, 78 - 55}
    assert result.full_model["id_eval"] > 0.8

    report = analyze(runs, max_core_units=2, non_core_sample=2, attention_examples=16, heatmaps=1,
                     show_progress=False)
    folder = runs / "report"
    saved = json.loads((folder / "report.json").read_text())
    assert saved["summary"] == json.loads(json.dumps(report["summary"]))
    # Numbers agree with the per-run files and the artifacts.
    for row in report["summary"]:
        values = [json.loads((runs / run_name(row["sparsity"], s) / "result.json").read_text())
                  ["eval"][row["eval_set"]]["accuracy"] for s in (0, 1)]
        assert (row["min"], row["max"]) == (min(values), max(values))
        assert row["mean"] == pytest.approx(np.mean(values)) and row["full_model"] == result.full_model[row["eval_set"]]
    for sparsity in (0.5, 0.7):
        heads = [read_artifact(runs / run_name(sparsity, s)).heads for s in (0, 1)]
        entry_stats = report["mask_statistics"]["per_sparsity"][f"sp{round(sparsity * 100)}"]
        assert entry_stats["head_frequency"] == (heads[0] + heads[1]).long().tolist()
        core_heads = {f"L{l}.H{h}" for l, h in (heads[0] * heads[1]).nonzero().tolist()}
        assert set(entry_stats["core"]["heads"]) == core_heads
    # analyze rebuilt the evaluation sets from the manifest: the full model scores what prune_many measured.
    ablation = report["ablation"]
    assert ablation["full_accuracy"] == pytest.approx(result.full_model)
    for row in ablation["rows"]:
        for name, delta in row["delta"].items():
            assert delta == pytest.approx(row["accuracy"][name] - ablation["full_accuracy"][name])
    core_heads = [u for u in report["core_units"] if ".H" in u]
    assert [r["head"] for r in report["attention"]["rows"]][:len(core_heads)] == core_heads
    for row in report["attention"]["rows"]:
        assert all(0.0 <= row[c] <= 1.0 for c in ("repeated", "previous", "next", "special"))
    for stem in ("mask_grid_sp50", "mask_grid_sp70", "joint_frequency_sp50_sp70", "accuracy_vs_sparsity",
                 "subnetwork_accuracies", "ablation_table"):
        _assert_figure(folder, stem)
    markdown = (folder / "report.md").read_text()
    for heading in ("## Accuracy per evaluation set", "## The core", "## Head frequency across sparsities",
                    "## Overlap between seeds", "## Control subnetworks", "## Ablation table",
                    "## Attention patterns of core heads"):
        assert heading in markdown
    assert "Skipped" not in markdown


def test_control_notes_in_the_report(runs_dir, caplog):
    """A complement control's note is shown under the controls table; one from an older runs folder that keeps
    fewer units than its learned subnetwork without a note gets one from analyze."""
    evaluation = json.loads((runs_dir / "sp50-seed0" / "result.json").read_text())["eval"]
    controls = {"sp50-random_from_complement": (0.5, 3, None),             # learned sp50-seed0 keeps 5
                "sp50-inverse": (0.5, 5, None),
                "sp70-random_from_complement": (0.7, 4, "The learned mask keeps more units than it prunes.")}
    for run, (sparsity, kept, note) in controls.items():
        (runs_dir / "controls" / run).mkdir(parents=True)
        write_json(runs_dir / "controls" / run / "result.json", {
            "run": run, "control": run.split("-", 1)[1], "sparsity": sparsity, "source_seed": 0,
            "realized_sparsity": 1 - kept / 10, "units_kept": kept, "units_total": 10, "eval": evaluation,
            **({"note": note} if note else {})})
    with caplog.at_level("WARNING", logger="hf_heuristic_core.analysis.report"):
        report = analyze(runs_dir, ablation=False, attention=False)
    notes = {c["run"]: c.get("note") for c in report["controls"]}
    older = ("it keeps 3 units, fewer than the 5 of the learned subnetwork: it was drawn by an older prune_many, "
             "which capped each layer at that layer's complement. Delete "
             f"{runs_dir / 'controls' / 'sp50-random_from_complement'} and run prune_many again to redraw it.")
    assert notes == {"sp50-random_from_complement": older, "sp50-inverse": None,
                     "sp70-random_from_complement": "The learned mask keeps more units than it prunes."}
    assert f"Control sp50-random_from_complement: {older}" in [r.getMessage() for r in caplog.records]
    markdown = (runs_dir / "report" / "report.md").read_text()
    assert "random subnetworks with as many units drawn from the units it prunes (random_from_complement; the " \
           "whole complement where that is smaller)" in markdown
    assert "| random_from_complement | 50% | 0.70 | 80.0 | 20.0 |" in markdown
    assert f"Note on random_from_complement at 50% sparsity: {older}" in markdown
    assert "Note on random_from_complement at 70% sparsity: The learned mask keeps more units than it prunes." \
           in markdown
    assert "Note on inverse" not in markdown
    saved = json.loads((runs_dir / "report" / "report.json").read_text())
    assert saved["controls"] == json.loads(json.dumps(report["controls"]))


def test_analyze_settings_object_and_keywords_give_the_same_report(runs_dir, tmp_path):
    by_keywords = analyze(runs_dir, output_dir=tmp_path / "a", ablation=False, attention=False, core_sparsity=0.5)
    by_object = analyze(runs_dir, AnalyzeSettings(output_dir=tmp_path / "b", ablation=False, attention=False,
                                                  core_sparsity=0.5))
    assert by_object["core_units"] == by_keywords["core_units"] and by_object["summary"] == by_keywords["summary"]
    assert (tmp_path / "a" / "report.md").read_text() == (tmp_path / "b" / "report.md").read_text()
    with pytest.raises(ValueError, match=r"analyze got settings= and \['ablation'\]"):
        analyze(runs_dir, AnalyzeSettings(), ablation=False)
    with pytest.raises(TypeError, match=r"analyze\(\) got unexpected keyword argument\(s\) \['ablations'\]"):
        analyze(runs_dir, ablations=False)
    with pytest.raises(ValueError, match=r"ablation_mode='mode' is not one of"):
        AnalyzeSettings(ablation_mode="mode")
