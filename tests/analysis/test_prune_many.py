"""prune_many (tiny model: files, resume, determinism, controls) and ablation tables checked against accuracies
computed independently with set_masks and a plain forward pass."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningConfig, read_artifact
from hf_heuristic_core.analysis import (ablation_masks, ablation_table, collect_results, datasets_from_spec,
                                        group_label, parse_unit, prune_many, run_name, summarize, unit_label,
                                        units_from_masks)
from hf_heuristic_core.analysis.prune_many import SeriesOptions
from hf_heuristic_core.analysis.report import analyze
from hf_heuristic_core.evaluation.options import EvaluationOptions
from hf_heuristic_core.training.setup import PruningSetup
from hf_heuristic_core.evaluation import evaluate_subnetwork
from tiny_models import one_torch_thread, tiny_model  # noqa: F401

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ------------------------------------------------------------------------------------------------ names and units
def test_unit_labels_round_trip():
    assert unit_label((4, 0)) == "L4.H0" and unit_label(("mlp", 3)) == "L3.MLP"
    for text, unit in (("L4.H0", (4, 0)), ("l4h0", (4, 0)), ("L10.H11", (10, 11)), ("L3.MLP", ("mlp", 3)),
                       ("L3 mlp", ("mlp", 3))):
        assert parse_unit(text) == unit and parse_unit(unit_label(unit)) == unit
    assert parse_unit([2, 5]) == (2, 5) and parse_unit(["MLP", 1]) == ("mlp", 1)
    for bad in ("H4.L0", "L4", (1, 2, 3), "mlp"):
        with pytest.raises(ValueError):
            parse_unit(bad)
    assert group_label([(2, 5), (3, 7), (4, 0)]) == "L2.H5 + L3.H7 + L4.H0"
    assert group_label([(0, h) for h in range(6)]).startswith("6 units jointly (L0.H0 + L0.H1")


def test_run_names():
    assert run_name(0.5, 3) == "sp50-seed3"
    assert run_name(0.05, 0) == "sp05-seed0"
    assert run_name(0.125, 1) == "sp12.5-seed1"
    assert run_name(0.7, 42) == "sp70-seed42"        # 0.7 * 100 is 70.00000000000001 in floating point


def test_ablation_masks_and_units_from_masks():
    masks = ablation_masks(["L1.H2", (0, 0), ("mlp", 1)], num_layers=2, num_heads=3)
    assert masks["heads"].tolist() == [[0, 1, 1], [1, 1, 0]] and masks["mlps"].tolist() == [1, 0]
    assert units_from_masks(1 - masks["heads"], 1 - masks["mlps"]) == [(0, 0), (1, 2), ("mlp", 1)]
    with pytest.raises(ValueError, match="out of range"):
        ablation_masks([(2, 0)], 2, 3)
    with pytest.raises(ValueError, match="out of range"):
        ablation_masks([("mlp", 5)], 2, 3)


def test_summarize_by_hand():
    rows = [{"sparsity": 0.5, "seed": 0, "id": 0.8, "ood": 0.1}, {"sparsity": 0.5, "seed": 1, "id": 0.6, "ood": None},
            {"sparsity": 0.5, "seed": 2, "id": 0.7, "ood": 0.3}, {"sparsity": 0.7, "seed": 0, "id": 0.5, "ood": 0.2}]
    summary = summarize(rows, {"id": 0.9, "ood": 0.4}, ["id", "ood"])
    by_key = {(r["sparsity"], r["eval_set"]): r for r in summary}
    first = by_key[(0.5, "id")]
    assert (first["min"], first["max"], first["full_model"], first["num_runs"]) == (0.6, 0.8, 0.9, 3)
    assert first["mean"] == pytest.approx(0.7) and first["std"] == pytest.approx(np.sqrt(0.02 / 3))
    assert by_key[(0.5, "ood")]["num_runs"] == 2 and by_key[(0.5, "ood")]["mean"] == pytest.approx(0.2)
    assert by_key[(0.7, "id")]["std"] == 0.0


# ------------------------------------------------------------------------------------------------ ablation table
def _examples(n: int, seed: int) -> list[dict]:
    generator = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(n):
        length = 5 + i % 4
        rows.append({"input_ids": torch.randint(3, 99, (length,), generator=generator).tolist(),
                     "attention_mask": [1] * length})
    return rows


def _padded(rows: list[dict]) -> dict[str, torch.Tensor]:
    length = max(len(r["input_ids"]) for r in rows)
    ids = torch.tensor([r["input_ids"] + [0] * (length - len(r["input_ids"])) for r in rows])
    mask = torch.tensor([r["attention_mask"] + [0] * (length - len(r["attention_mask"])) for r in rows])
    return {"input_ids": ids, "attention_mask": mask}


@pytest.fixture(scope="module")
def ablation_setup():
    """A tiny 3-label BERT with means, and two labelled sets: one labelled with the full model's own predictions
    (full accuracy 1, so every changed prediction shows), one with random labels."""
    model = PrunableModel(tiny_model("bert"), PruningConfig())
    rows_a, rows_b = _examples(40, 1), _examples(40, 2)
    model.compute_means(_padded(rows_a + rows_b), show_progress=False)
    with torch.no_grad(), model.masks_disabled():
        own = model(**_padded(rows_a)).logits.argmax(-1)
    labels_b = torch.randint(0, 3, (40,), generator=torch.Generator().manual_seed(3))
    sets = {"own": datasets.Dataset.from_list([{**r, "label": int(y)} for r, y in zip(rows_a, own)]),
            "random": datasets.Dataset.from_list([{**r, "label": int(y)} for r, y in zip(rows_b, labels_b)])}
    return model, sets, {"own": (rows_a, own), "random": (rows_b, labels_b)}


def _independent_accuracy(model: PrunableModel, data, ablated=None, mode: str = "mean") -> float:
    """Accuracy with the units `ablated` (None: the full model) from one plain forward pass."""
    rows, labels = data
    batch = _padded(rows)
    model.clear_masks()
    with torch.no_grad(), model.using_ablation(mode):
        if ablated is None:
            with model.masks_disabled():
                logits = model(**batch).logits
        else:
            heads, mlps = torch.ones(2, 4), torch.ones(2)
            for unit in ablated:
                if unit[0] == "mlp":
                    mlps[unit[1]] = 0
                else:
                    heads[unit] = 0
            model.set_masks(heads=heads, mlps=mlps)
            logits = model(**batch).logits
            model.clear_masks()
    return int((logits.argmax(-1) == labels).sum()) / len(labels)


@pytest.mark.parametrize("mode", ["mean", "zero"])
def test_ablation_deltas_equal_independent_accuracy_differences(ablation_setup, mode):
    model, sets, raw = ablation_setup
    core = [(0, 1), (1, 2), ("mlp", 0)]
    table = ablation_table(model, sets, core, mode=mode, batch_size=64, show_progress=False)
    full = {name: _independent_accuracy(model, raw[name], None, mode) for name in sets}
    assert table.full_accuracy == pytest.approx(full) and full["own"] == 1.0
    singles = [r for r in table.rows if r.kind == "single"]
    assert [r.label for r in singles] == ["L0.H1", "L1.H2", "L0.MLP"]
    single_delta = {}
    for row in singles:
        for name in sets:
            expected = _independent_accuracy(model, raw[name], row.units, mode) - full[name]
            assert row.delta[name] == pytest.approx(expected, abs=1e-12)
            assert row.accuracy[name] == pytest.approx(expected + full[name], abs=1e-12)
            single_delta[(row.units[0], name)] = expected
    assert any(abs(d) > 0 for d in single_delta.values()), "the test needs ablations that change predictions"

    (joint,) = [r for r in table.rows if r.kind == "joint"]
    assert joint.label == "L0.H1 + L1.H2 + L0.MLP" and joint.units == core
    for name in sets:
        expected = _independent_accuracy(model, raw[name], core, mode) - full[name]
        assert joint.delta[name] == pytest.approx(expected, abs=1e-12)
        total = sum(single_delta[(u, name)] for u in core)
        assert joint.sum_of_singles[name] == pytest.approx(total, abs=1e-12)
        assert joint.super_additive[name] == (abs(expected) > abs(total) + 1e-12)

    (average,) = [r for r in table.rows if r.kind == "non_core_average"]
    pool = [(l, h) for l in range(2) for h in range(4) if (l, h) not in core]
    assert [r.units[0] for r in table.non_core] == pool and average.label == "average non-core head (n=6)"
    for name in sets:
        deltas = [_independent_accuracy(model, raw[name], [u], mode) - full[name] for u in pool]
        assert average.delta[name] == pytest.approx(np.mean(deltas), abs=1e-12)
        assert average.std[name] == pytest.approx(np.std(deltas), abs=1e-12)

    plot = table.plot_table()
    assert list(plot) == ["L0.H1", "L1.H2", "L0.MLP", joint.label, f"sum of singles ({joint.label})", average.label]
    assert plot["L1.H2"] == singles[1].delta
    saved = json.loads(json.dumps(table.to_dict()))
    assert saved["rows"][3]["units"] == ["L0.H1", "L1.H2", "L0.MLP"] and saved["mode"] == mode


def test_non_core_sample_and_explicit_groups(ablation_setup):
    model, sets, _ = ablation_setup
    kwargs = dict(batch_size=64, show_progress=False)
    first = ablation_table(model, sets, ["L0.H0"], core=["L0.H0", "L1.H1"], joint=[["L0.H0", "L1.H3"]],
                           non_core_sample=3, seed=5, **kwargs)
    again = ablation_table(model, sets, ["L0.H0"], core=["L0.H0", "L1.H1"], joint=[], non_core_sample=3, seed=5,
                           **kwargs)
    sampled = [r.units[0] for r in first.non_core]
    assert len(sampled) == 3 and sampled == [r.units[0] for r in again.non_core]
    assert not {(0, 0), (1, 1)} & set(sampled)
    assert [(r.label, r.kind) for r in first.rows] == [("L0.H0", "single"), ("L1.H3", "single"),
                                                        ("L0.H0 + L1.H3", "joint"), ("average non-core head (n=3)",
                                                                                     "non_core_average")]
    joint = first.rows[2]
    single_13 = ablation_table(model, sets, ["L1.H3"], joint=[], non_core_sample=0, **kwargs).rows[0]
    assert first.rows[1].delta == single_13.delta
    for name in sets:
        assert joint.sum_of_singles[name] == pytest.approx(first.rows[0].delta[name] + single_13.delta[name])
    assert not [r for r in again.rows if r.kind == "joint"]
    with_mlps = ablation_table(model, sets, ["L0.H0"], joint=[], non_core_kinds=("heads", "mlps"), **kwargs)
    assert len(with_mlps.non_core) == 7 + 2 and with_mlps.rows[-1].label == "average non-core unit (n=9)"


def test_ablation_table_needs_labels(ablation_setup):
    model, sets, _ = ablation_setup
    unlabeled = {"x": sets["own"].remove_columns("label")}
    with pytest.raises(ValueError, match="labels"):
        ablation_table(model, unlabeled, [(0, 0)], show_progress=False)


# ------------------------------------------------------------------------------------------------ prune_many
OVERRIDES = dict(max_steps=4, warmup_steps=1, sparsity_warmup_steps=2, per_device_train_batch_size=16,
                 teacher="cached", sparsity_penalty="expected", reg_learning_rate=0.1, use_cpu=True)


def _train_and_eval():
    rows = _examples(64, 7)
    labels = torch.randint(0, 3, (64,), generator=torch.Generator().manual_seed(8))
    data = datasets.Dataset.from_list([{**r, "label": int(y)} for r, y in zip(rows, labels)])
    return data, {"a": data.select(range(24)), "b": data.select(range(24, 48))}


def _fresh_model():
    return PrunableModel(tiny_model("bert"), PruningConfig(init_mean=3.0))


def test_prune_many_files_results_and_controls(tmp_path):
    train, eval_sets = _train_and_eval()
    runs = tmp_path / "runs"
    result = prune_many(_fresh_model(), train, eval_sets, runs, [0.3, 0.5], [0, 1], pruning_overrides=OVERRIDES,
                        show_progress=False)
    names = ["sp30-seed0", "sp30-seed1", "sp50-seed0", "sp50-seed1"]
    assert [r["run"] for r in result.results] == names
    for name in names:
        assert {"masks.safetensors", "pruning_config.json", "result.json"} <= {p.name for p in (runs / name).iterdir()}
        assert (runs / name / "masks.safetensors").stat().st_size < 20_000
    for name in ("manifest.json", "full_model.json", "results.json", "results.csv", "summary.csv"):
        assert (runs / name).is_file()
    manifest = json.loads((runs / "manifest.json").read_text())
    assert manifest["sparsities"] == [0.3, 0.5] and manifest["seeds"] == [0, 1] and manifest["eval_sets"] == ["a", "b"]
    assert manifest["pruning_overrides"] == OVERRIDES
    assert manifest["pruning_config"]["relaxation_settings"]["init_mean"] == 3.0

    # Every number is recomputed independently from the saved artifacts.
    checker = _fresh_model()
    checker.compute_means(train, show_progress=False)
    full = evaluate_subnetwork(checker, eval_sets, masks={"heads": torch.ones(2, 4), "mlps": torch.ones(2)})
    assert result.full_model == {n: full[n]["accuracy"] for n in eval_sets}
    artifacts = {}
    for row in result.results:
        artifact = read_artifact(runs / row["run"])
        artifacts[row["run"]] = artifact
        kept = int(artifact.heads.sum() + artifact.mlps.sum())
        assert row["units_kept"] == kept == 10 - round(row["sparsity"] * 10)
        assert row["realized_sparsity"] == pytest.approx(1 - kept / 10)
        checker.set_means(artifact.tensors["means.heads"], artifact.tensors["means.mlps"])
        again = evaluate_subnetwork(checker, eval_sets, masks={"heads": artifact.heads, "mlps": artifact.mlps})
        for name in eval_sets:
            assert row[name] == again[name]["accuracy"]
            assert row[f"agreement/{name}"] == again[name]["agreement"]
            assert row[f"kl/{name}"] == pytest.approx(again[name]["kl"], abs=1e-6)
    assert result.summary == summarize(result.results, result.full_model, ["a", "b"])
    saved = json.loads((runs / "results.json").read_text())
    assert saved["results"] == result.results and saved["summary"] == result.summary
    header = (runs / "results.csv").read_text().splitlines()[0].split(",")
    assert header[:4] == ["run", "sparsity", "seed", "realized_sparsity"] and "kl/b" in header

    assert [(c["sparsity"], c["control"]) for c in result.controls] == [
        (s, k) for s in (0.3, 0.5) for k in ("random_like", "random_from_complement", "inverse")]
    for sparsity in (0.3, 0.5):
        source = artifacts[run_name(sparsity, 0)]
        controls = {c["control"]: json.loads((runs / "controls" / f"sp{round(sparsity * 100)}-{c['control']}" /
                                              "result.json").read_text())["masks"]
                    for c in result.controls if c["sparsity"] == sparsity}
        like = torch.tensor(controls["random_like"]["heads"])
        assert like.sum(1).tolist() == source.heads.sum(1).tolist()
        assert sum(controls["random_like"]["mlps"]) == int(source.mlps.sum())
        assert torch.equal(torch.tensor(controls["inverse"]["heads"]), 1 - source.heads.long())
        complement = torch.tensor(controls["random_from_complement"]["heads"])
        assert int((complement * source.heads.long()).sum()) == 0


def test_prune_many_is_deterministic_and_resumable(tmp_path, monkeypatch):
    from hf_heuristic_core.training.trainer import PruningTrainer
    train, eval_sets = _train_and_eval()
    kwargs = dict(pruning_overrides=OVERRIDES, show_progress=False, controls=False)
    first = prune_many(_fresh_model(), train, eval_sets, tmp_path / "a", [0.5], [0, 1, 2], **kwargs)
    model = _fresh_model()
    second = prune_many(model, train, eval_sets, tmp_path / "b", [0.5], [0, 1, 2], **kwargs)
    for a, b in zip(first.results, second.results):
        assert a == b
        assert torch.equal(read_artifact(tmp_path / "a" / a["run"]).heads,
                           read_artifact(tmp_path / "b" / b["run"]).heads)
    masks = [read_artifact(tmp_path / "a" / r["run"]).heads for r in first.results]
    assert not all(torch.equal(masks[0], m) for m in masks[1:]), "seeds should give different masks"

    def no_training(self, *args, **kwargs):
        raise AssertionError("a finished run was trained again")
    monkeypatch.setattr(PruningTrainer, "train", no_training)
    (tmp_path / "b" / "sp50-seed1" / "result.json").unlink()      # crashed after saving masks: evaluate only
    resumed = prune_many(model, train, eval_sets, tmp_path / "b", [0.5], [0, 1, 2], **kwargs)
    assert resumed.results == second.results
    assert collect_results(tmp_path / "b").results == second.results


def test_prune_many_checks_its_arguments(tmp_path):
    train, eval_sets = _train_and_eval()
    with pytest.raises(ValueError, match="may not set"):
        prune_many(_fresh_model(), train, eval_sets, tmp_path, [0.5], [0], pruning_overrides={"seed": 3})
    with pytest.raises(ValueError, match="evaluation set"):
        prune_many(_fresh_model(), train, {}, tmp_path, [0.5], [0])


# ------------------------------------------------------------------------------------------------ data specs
def test_datasets_from_spec(minilm_dir, tmp_path):
    from transformers import AutoTokenizer
    from hf_heuristic_core import generate_nli
    tokenizer = AutoTokenizer.from_pretrained(minilm_dir)
    kwargs = dict(train_size=40, id_eval_size=20, ood_eval_size_per_subcase=4, seed=1)
    table = tmp_path / "pairs.jsonl"
    table.write_text('{"premise": "A cat ran.", "hypothesis": "A cat moved.", "label": 0}\n' * 3)
    spec = {"max_length": 16,
            "train": {"source": "generate_nli", "kwargs": kwargs, "split": "train", "limit": 10},
            "eval_sets": {"so": {"source": "generate_nli", "kwargs": kwargs, "split": "ood_eval",
                                 "subcases": ["SO-Swap"]},
                          "file": {"source": "table", "path": str(table)}}}
    train, sets = datasets_from_spec(spec, tokenizer)
    raw = generate_nli(**kwargs)
    assert len(train) == 10 and len(sets["so"]) == 4 and len(sets["file"]) == 3
    assert set(train.column_names) == {"input_ids", "token_type_ids", "attention_mask", "labels"}
    expected = tokenizer(raw["train"][0]["premise"], raw["train"][0]["hypothesis"], truncation=True, max_length=16)
    assert train[0]["input_ids"] == expected["input_ids"] and train[0]["labels"] == raw["train"][0]["label"]
    with pytest.raises(ValueError, match="Unknown data source"):
        datasets_from_spec({"eval_sets": {"x": {"source": "nope"}}}, tokenizer)


# ------------------------------------------------------------------------------------------------ control subnetworks
def test_control_masks_by_hand():
    from hf_heuristic_core.analysis.prune_many import complement_mix, complement_shortfall, control_masks
    # 5 of 12 heads kept; layer 0 keeps all 4, so its complement is empty and its 4 units go to other layers'.
    heads, mlps = torch.tensor([[1.0, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0]]), torch.tensor([1.0, 0, 0])
    masks, kinds = {"heads": heads, "mlps": mlps}, ["heads", "mlps"]
    for seed in range(20):
        controls = control_masks(masks, kinds, torch.Generator().manual_seed(seed))
        like, complement = controls["random_like"], controls["random_from_complement"]
        assert like["heads"].sum(1).tolist() == [4, 1, 0] and int(like["mlps"].sum()) == 1     # per layer exactly
        assert int(complement["heads"].sum()) == 5 and int((complement["heads"] * heads).sum()) == 0
        assert complement["heads"][0].sum() == 0 and 1 <= int(complement["heads"][1].sum()) <= 3
        assert int(complement["mlps"].sum()) == 1 and complement["mlps"][0] == 0
        assert controls["inverse"]["heads"].tolist() == (1 - heads).tolist()
        assert controls["inverse"]["mlps"].tolist() == [0, 1, 1]
        assert all(m.dtype == torch.float32 for c in controls.values() for m in c.values())
        assert complement_shortfall(masks, complement, kinds) is None
        assert complement_mix(masks, complement, kinds) is None
    first, again = (control_masks(masks, kinds, torch.Generator().manual_seed(3)) for _ in range(2))
    assert all(torch.equal(first[c][k], again[c][k]) for c in first for k in first[c])
    # A kind that was not pruned stays all-ones in every control.
    heads_only = control_masks(masks, ["heads"], torch.Generator().manual_seed(0))
    assert all(c["mlps"].tolist() == [1, 1, 1] for c in heads_only.values())

    # Both MLP blocks kept (their complement is empty) and 1 of 6 heads: 3 units kept, 5 pruned. The control takes
    # 1 head from layer 0's complement, then the 2 units the MLP complement cannot hold from the 4 free heads left.
    mixed = {"heads": torch.tensor([[1.0, 0, 0], [0, 0, 0]]), "mlps": torch.tensor([1.0, 1])}
    for seed in range(20):
        complement = control_masks(mixed, kinds, torch.Generator().manual_seed(seed))["random_from_complement"]
        assert complement["mlps"].tolist() == [0, 0] and int(complement["heads"].sum()) == 3
        assert complement["heads"][0, 0] == 0 and complement["heads"][0].sum() >= 1
        assert complement_shortfall(mixed, complement, kinds) is None
        assert complement_mix(mixed, complement, kinds) == (
            "The units come in another mix of kinds than the learned subnetwork's (heads: 1 kept, 3 drawn; mlps: 2 "
            "kept, 0 drawn): where the complement of a kind was smaller than what the learned subnetwork keeps of "
            "it, the rest was drawn from other kinds' complements.")

    # 6 of 8 units kept: the complement holds 2, so the control keeps it and says so.
    dense = {"heads": torch.tensor([[1.0, 1, 1], [1, 1, 0]]), "mlps": torch.tensor([1.0, 0])}
    complement = control_masks(dense, kinds, torch.Generator().manual_seed(0))["random_from_complement"]
    assert complement["heads"].tolist() == [[0, 0, 0], [0, 0, 1]] and complement["mlps"].tolist() == [0, 1]
    assert complement_mix(dense, complement, kinds) is None
    assert complement_shortfall(dense, complement, kinds) == (
        "The learned subnetwork keeps more units than it prunes (6 kept, 2 pruned), so this control keeps the "
        "whole complement and is sparser than the learned subnetwork.")


def test_prune_many_complement_controls_match_the_learned_size(tmp_path, caplog):
    """Heads only (8): at 25% sparsity the learned mask keeps 6 > 2 pruned (whole complement, with a note and a
    warning); at 50% it keeps 4 = 4 pruned (as many units as the learned mask: the whole complement, no note)."""
    import logging
    from hf_heuristic_core.analysis.report import analyze
    train, eval_sets = _train_and_eval()
    runs = tmp_path / "runs"
    model = PrunableModel(tiny_model("bert"), PruningConfig(init_mean=3.0, prune_mlps=False))
    with caplog.at_level(logging.WARNING, logger="hf_heuristic_core.analysis.prune_many"):
        result = prune_many(model, train, eval_sets, runs, [0.25, 0.5], [0], pruning_overrides=OVERRIDES,
                            show_progress=False)
    note = ("The learned subnetwork keeps more units than it prunes (6 kept, 2 pruned), so this control keeps the "
            "whole complement and is sparser than the learned subnetwork.")
    assert [r.getMessage() for r in caplog.records if r.name.startswith("hf_heuristic_core.analysis")] == \
        [f"sp25-random_from_complement: {note}"]
    for sparsity, kept in ((0.25, 6), (0.5, 4)):
        learned = read_artifact(runs / run_name(sparsity, 0)).heads
        assert int(learned.sum()) == kept
        saved = json.loads((runs / "controls" / f"sp{round(sparsity * 100)}-random_from_complement" /
                            "result.json").read_text())
        complement = torch.tensor(saved["masks"]["heads"])
        assert int(complement.sum()) == min(kept, 8 - kept) == saved["units_kept"]
        assert torch.equal(complement, 1 - learned.long())          # here both cases take the whole complement
        assert saved["masks"]["mlps"] == [1, 1]
        assert saved.get("note") == (note if sparsity == 0.25 else None)
    rows = {(c["sparsity"], c["control"]): c for c in result.controls}
    assert rows[(0.25, "random_from_complement")]["note"] == note
    assert "note" not in rows[(0.5, "random_from_complement")] and "note" not in rows[(0.25, "inverse")]
    assert rows[(0.5, "random_from_complement")]["realized_sparsity"] == result.results[1]["realized_sparsity"]
    assert "note" in (runs / "results.csv").read_text().splitlines()[0].split(",")

    analyze(runs, ablation=False, attention=False)
    markdown = (runs / "report" / "report.md").read_text()
    assert f"Note on random_from_complement at 25% sparsity: {note}" in markdown
    assert "Note on random_from_complement at 50% sparsity" not in markdown


def test_prune_many_records_convergence_and_the_report_flags_runs_that_did_not(tmp_path, caplog):
    """A run too short for the paper's recipe (init 10: the logits keep their initial ranking) is recorded as not
    converged in result.json and results.csv, and analyze warns and flags it at the top of report.md."""
    train, eval_sets = _train_and_eval()
    runs = tmp_path / "runs"
    paper = dict(max_steps=2, per_device_train_batch_size=16, use_cpu=True, recipe="paper", convergence_batches=2)
    prune_many(PrunableModel(tiny_model("bert"), PruningConfig()), train, eval_sets, runs, [0.5], [0, 1],
               pruning_overrides=paper, show_progress=False, controls=False)
    for seed in (0, 1):
        result = json.loads((runs / run_name(0.5, seed) / "result.json").read_text())
        stored = read_artifact(runs / run_name(0.5, seed)).config.extra["convergence"]
        assert result["converged"] is False and result["convergence"] == stored
        assert result["convergence"]["verdict"] == "the mask logits kept their initial ranking"
    assert "converged" in (runs / "results.csv").read_text().splitlines()[0]
    with caplog.at_level(logging.WARNING, logger="hf_heuristic_core.analysis"):
        report = analyze(runs, ablation=False, attention=False)
    assert [r["run"] for r in report["not_converged"]] == ["sp50-seed0", "sp50-seed1"]
    assert sum("did not converge" in r.getMessage() for r in caplog.records if r.name.endswith("report")) == 2
    text = (runs / "report" / "report.md").read_text()
    assert "**Warning: 2 of 2 pruning runs did not converge**" in text
    assert "sp50-seed0 (the mask logits kept their initial ranking)" in text


def test_prune_many_refuses_a_runs_folder_of_other_settings_but_takes_more_seeds(tmp_path):
    from hf_heuristic_core.run_folder import OutputFolderError
    train, eval_sets = _train_and_eval()
    kwargs = dict(pruning_overrides=OVERRIDES, show_progress=False, controls=False)
    prune_many(_fresh_model(), train, eval_sets, tmp_path / "runs", [0.5], [0], **kwargs)
    more = prune_many(_fresh_model(), train, eval_sets, tmp_path / "runs", [0.5], [0, 1], **kwargs)   # more seeds
    assert [r["run"] for r in more.results] == ["sp50-seed0", "sp50-seed1"]
    other = {**OVERRIDES, "max_steps": 5}
    with pytest.raises(OutputFolderError, match=r"settings differ: pruning_overrides.max_steps: 4 -> 5"):
        prune_many(_fresh_model(), train, eval_sets, tmp_path / "runs", [0.5], [2], **{**kwargs,
                                                                                     "pruning_overrides": other})
    with pytest.raises(OutputFolderError, match=r"train_data"):   # other training data, same everything else
        prune_many(_fresh_model(), train.select(range(32)), eval_sets, tmp_path / "runs", [0.5], [2], **kwargs)
    assert not (tmp_path / "runs" / "sp50-seed2").exists()


def _results(folder: Path) -> dict:
    """Every run's result.json, without the wall-clock seconds."""
    found = {}
    for path in sorted(folder.glob("sp*-seed*/result.json")):
        data = json.loads(path.read_text())
        data.pop("seconds")
        found[path.parent.name] = data
    return found


def test_prune_many_objects_and_keywords_write_the_same_runs(tmp_path):
    train, eval_sets = _train_and_eval()
    prune_many(_fresh_model(), train, eval_sets, tmp_path / "keywords", [0.5], [0], pruning_overrides=OVERRIDES,
               show_progress=False, controls=False, eval_batch_size=8)
    prune_many(_fresh_model(), train, eval_sets, tmp_path / "objects", [0.5], [0],
               pruning=PruningSetup(overrides=OVERRIDES, means_examples=1024, show_progress=False),
               evaluation=EvaluationOptions(batch_size=8), options=SeriesOptions(controls=False))
    assert _results(tmp_path / "objects") == _results(tmp_path / "keywords") != {}
    manifests = [json.loads((tmp_path / name / "manifest.json").read_text()) for name in ("keywords", "objects")]
    assert manifests[0] == manifests[1] and manifests[0]["eval_batch_size"] == 8
