"""`repro_lepori_subtasks.py`'s random-initialised-model control (Lepori's `Random_Configs`): masks trained the same
way on the untrained model of each base seed, recorded beside the trained masks and read by his criterion (the
trained D_abl below the control's). Tiny models, one mask step: a few seconds."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch
from transformers import BertConfig, BertModel

from benchmark_scripts import load_script
from hf_heuristic_core.data.compositional import MAX_LENGTH, AgreementVocabulary


@pytest.fixture(scope="module")
def lepori() -> ModuleType:
    return load_script("reproductions/repro_lepori_subtasks")


def _tiny_args(**changes) -> argparse.Namespace:
    """The settings `main()` parses, shrunk so a base model, both searches and the control take about a second."""
    values = dict(hidden=8, layers=1, heads=2, words_per_class=4, train_examples=64, validation_examples=16,
                  test_examples=16, base_lr=1e-3, base_epochs=1, mask_epochs=1, mask_epoch_examples=64,
                  inits=[0.05], mask_lrs=[0.01], mask_lambdas=[1e-5], mask_seeds=[0, 1], subtasks=["sr1", "sr2"],
                  random_controls=1, device="cpu", masks_dir=None, first_seed=0, random_init_control=True)
    values.update(changes)
    return argparse.Namespace(**values)


def _fresh_init(seed: int, args: argparse.Namespace, vocab: AgreementVocabulary) -> dict[str, torch.Tensor]:
    """An independent reference for "untrained": the BertModel the config gives right after torch.manual_seed."""
    torch.manual_seed(seed)
    config = BertConfig(vocab_size=vocab.size, hidden_size=args.hidden, num_hidden_layers=args.layers,
                        num_attention_heads=args.heads, intermediate_size=4 * args.hidden,
                        max_position_embeddings=MAX_LENGTH, type_vocab_size=1, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    return BertModel(config, add_pooling_layer=False).state_dict()


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.fixture(scope="module")
def control_run(lepori: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One `run_seed` with the control on, every `train_mask` call spied on: which model's weights it masked, with
    which setting and seed. `scores` is stubbed to 1.0 so the 1-epoch base model passes the 90% drop rule; the
    masks, searches and control are the real code."""
    vocab = AgreementVocabulary(words_per_class=4)
    args = _tiny_args()
    calls = []
    real_train_mask = lepori.train_mask

    def spy(pm, subtask, init, lr, lam, data, args_, seed):
        # the stored weights, under their plain names (the weight masks parametrize `weight` as `.original`)
        weights = {k.replace(".parametrizations.weight.original", ".weight"): v.detach().clone()
                   for k, v in pm.model.state_dict().items()}
        calls.append({"subtask": subtask, "init": init, "lr": lr, "lambda": lam, "seed": seed, "weights": weights})
        return real_train_mask(pm, subtask, init, lr, lam, data, args_, seed)

    real_scores = lepori.scores
    lepori.train_mask, lepori.scores = spy, (lambda model, data, batch=250: (1.0, 1.0))
    try:
        folder = tmp_path_factory.mktemp("run")
        out = lepori.run_seed(3, args, vocab, folder)
    finally:
        lepori.train_mask, lepori.scores = real_train_mask, real_scores
    trained = torch.load(folder / "base3.pt", weights_only=False)["state_dict"]
    return {"out": out, "calls": calls, "trained": trained, "fresh": _fresh_init(3, args, vocab),
            "other_seed": _fresh_init(4, args, vocab), "args": args, "folder": folder}


def test_control_model_is_the_untrained_init_of_the_same_seed(lepori, control_run):
    fresh, trained = control_run["fresh"], control_run["trained"]
    model = lepori.control_model(3, control_run["args"], AgreementVocabulary(words_per_class=4))
    assert _equal(model.state_dict(), fresh)
    assert not _equal(model.state_dict(), trained)          # the trained base moved away from its init
    assert not _equal(model.state_dict(), control_run["other_seed"])
    assert not any(p.requires_grad for p in model.parameters())


def test_control_masks_are_trained_on_the_untrained_model_with_the_chosen_settings(control_run):
    """The spy sees the weights each mask training runs on: the search (trained base) first, then the control on
    the fresh init, with each subroutine's chosen setting and the trained masks' seed scheme (seed + 100 x mask
    seed)."""
    calls, out = control_run["calls"], control_run["out"]
    base_calls = [c for c in calls if _equal(c["weights"], control_run["trained"])]
    control_calls = [c for c in calls if _equal(c["weights"], control_run["fresh"])]
    assert len(base_calls) + len(control_calls) == len(calls)
    assert len(control_calls) == 2 * 2                        # 2 subroutines x 2 mask seeds
    for subtask in ("sr1", "sr2"):
        chosen = out[subtask]["chosen"]
        mine = [c for c in control_calls if c["subtask"] == subtask]
        assert [c["seed"] for c in mine] == [3, 103]
        assert all((c["init"], c["lr"], c["lambda"]) == (chosen["init"], chosen["lr"], chosen["lambda"])
                   for c in mine)


def test_control_results_are_recorded_beside_the_trained_ones(lepori, control_run):
    out, folder = control_run["out"], control_run["folder"]
    assert set(out["random_init_control"]) == {"compositional", "sr1", "sr2", "odd_sr1", "odd_sr2"}
    for subtask in ("sr1", "sr2"):
        trained, control = out[subtask]["masks"], out[subtask]["control"]
        assert [m["mask_seed"] for m in control] == [m["mask_seed"] for m in trained] == [0, 1]
        for entry in control:     # the same test as the trained masks: D values, random ablations, margins
            assert set(entry) >= {"d_sub", "d_abl", "random_d_abl", "kept", "sub_target_margin_share",
                                  "abl_target_margin_share"}
        reading = out[subtask]["reading"]
        assert reading["trained_d_abl"] == pytest.approx(sum(m["d_abl"] for m in trained) / 2)
        assert reading["control_d_abl"] == pytest.approx(sum(m["d_abl"] for m in control) / 2)
        chosen = out[subtask]["chosen"]
        for mask_seed in (0, 1):  # saved, so a rerun resumes instead of retraining
            assert lepori.control_mask_file(folder, 3, subtask, mask_seed, chosen["init"], chosen["lr"],
                                            chosen["lambda"]).is_file()
    summary = lepori.summarize([out])["random_init_control"]
    assert set(summary) == {"paper", "sr1", "sr2"} and summary["sr1"]["readings"] == {"3": out["sr1"]["reading"]
                                                                                       ["verdict"]}


def test_control_off_records_nothing(lepori, tmp_path, monkeypatch):
    monkeypatch.setattr(lepori, "scores", lambda model, data, batch=250: (1.0, 1.0))
    out = lepori.run_seed(0, _tiny_args(random_init_control=False, mask_seeds=[0], subtasks=["sr1"]),
                          AgreementVocabulary(words_per_class=4), tmp_path)
    assert "random_init_control" not in out and "control" not in out["sr1"]
    assert not list(tmp_path.glob("control*"))
    assert lepori.summarize([out])["random_init_control"] == {"paper": lepori.PAPER_CONTROL}


@pytest.mark.parametrize("trained, control, verdict", [
    ([-0.30], [+0.40], "evidence"),          # his released pattern: trained below the control
    ([-0.10, -0.20], [0.05, 0.15], "evidence"),
    ([+0.20], [+0.20], "none"),              # equal: D_sub > 0 alone is not evidence
    ([-0.006], [+0.03], "none"),             # below, but within the tolerance
    ([+0.30], [-0.10], "opposite"),
])
def test_reading_on_hand_made_numbers(lepori, trained, control, verdict):
    reading = lepori.ablation_reading(trained, control, tolerance=0.05)
    assert reading["verdict"] == verdict
    assert reading["gap"] == pytest.approx(sum(trained) / len(trained) - sum(control) / len(control))


def test_reading_tolerance_and_errors(lepori):
    assert lepori.reading_tolerance(1000) == pytest.approx(2 / 1000 ** 0.5)   # 0.063: 2 SE, worst case p = 1/2
    assert lepori.reading_tolerance(100) == pytest.approx(0.2)
    with pytest.raises(ValueError, match="test_examples must be >= 1"):
        lepori.reading_tolerance(0)
    with pytest.raises(ValueError, match="random-initialised control on"):
        lepori.ablation_reading([-0.2], [], 0.05)
    with pytest.raises(ValueError, match="tolerance must be >= 0"):
        lepori.ablation_reading([-0.2], [0.1], -0.01)


def test_summary_per_subroutine_on_hand_made_runs(lepori):
    def sub(trained_abl, control_abl, verdict):
        return {"masks": [{"d_sub": 0.5, "d_abl": trained_abl}], "control": [{"d_sub": 0.6, "d_abl": control_abl,
                                                                             "kept": 0.4}],
                "reading": {"verdict": verdict}}
    runs = [{"seed": 0, "base_ok": True, "sr1": sub(-0.3, 0.4, "evidence"), "sr2": sub(0.1, 0.1, "none")},
            {"seed": 1, "base_ok": True, "sr1": sub(-0.1, 0.2, "evidence"), "sr2": sub(-0.2, 0.3, "evidence")},
            {"seed": 2, "base_ok": False}]
    summary = lepori.summarize_control(runs)
    assert summary["sr1"]["trained_d_abl"] == pytest.approx(-0.2)
    assert summary["sr1"]["control_d_abl"] == pytest.approx(0.3)
    assert summary["sr1"]["evidence"] == 2 and summary["sr1"]["base_models"] == 2
    assert summary["sr2"]["readings"] == {"0": "none", "1": "evidence"} and summary["sr2"]["evidence"] == 1


def test_flag_is_recorded_and_resuming_with_the_other_value_is_refused(lepori, tmp_path, monkeypatch):
    """Through `main()`: the flag's default is on, it lands in run_settings.json, and the same run directory with
    `--no-random_init_control` is refused by name (its base models would be read against no control)."""
    seen = []
    monkeypatch.setattr(lepori, "run_seed", lambda seed, args, vocab, folder: seen.append(args) or {"seed": seed})
    run_dir = tmp_path / "run"
    monkeypatch.setattr(sys, "argv", ["repro", "--seeds", "0", "--run_dir", str(run_dir)])
    lepori.main()
    assert seen[-1].random_init_control is True
    assert json.loads((run_dir / "run_settings.json").read_text())["random_init_control"] is True
    monkeypatch.setattr(sys, "argv", ["repro", "--seeds", "0", "--run_dir", str(run_dir), "--no-random_init_control"])
    with pytest.raises(SystemExit, match=r"other settings.*'random_init_control': \(True, False\)"):
        lepori.main()


def test_merge_refuses_files_with_and_without_the_control(lepori, tmp_path):
    def output(path: Path, seed: int, control: bool) -> str:
        path.write_text(json.dumps({"runs": [{"seed": seed}], "seconds": 1.0,
                                    "settings": {"hidden": 32, "random_init_control": control}}))
        return str(path)
    with pytest.raises(SystemExit, match="other settings"):
        lepori.merge_outputs([output(tmp_path / "a.json", 0, True), output(tmp_path / "b.json", 1, False)])
