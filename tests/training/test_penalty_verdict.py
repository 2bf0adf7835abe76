"""Under a fixed penalty (`sparsity_control="penalty"`) there is no target: a run that prunes nothing is "not
converged" with the penalty named as the cause (it used to exit as "inconclusive", blaming an untrained head), no
log line prints a target, and the advice never repeats the setting the run already uses."""

from __future__ import annotations

import logging

import datasets
import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningArguments, PruningConfig, PruningTrainer
from hf_heuristic_core.training.convergence import check_convergence, verdict_line
from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import planted_bert

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _data(n: int = 32) -> datasets.Dataset:
    ids = torch.randint(3, 99, (n, 8), generator=torch.Generator().manual_seed(0))
    return datasets.Dataset.from_dict({"input_ids": ids.tolist()})


def test_a_penalty_run_that_prunes_nothing_is_not_converged_and_names_the_penalty(tmp_path, caplog):
    pm = PrunableModel(planted_bert(), PruningConfig(ablation="zero"))
    args = PruningArguments(output_dir=str(tmp_path), sparsity_control="penalty", penalty_weight=0.0, max_steps=2,
                            per_device_train_batch_size=8, use_cpu=True, report_to="none", disable_tqdm=True,
                            save_strategy="no", logging_steps=1, seed=0, convergence_subnetworks=2,
                            convergence_batches=1)
    trainer = PruningTrainer(model=pm, args=args, train_dataset=_data())
    with caplog.at_level(logging.INFO, logger="hf_heuristic_core"):
        trainer.train()
    report = trainer.convergence
    assert pm.sparsity() == 0.0
    assert report.status == "not_converged" and report.converged is False
    assert report.verdict == ("nothing was pruned: the fixed penalty (sparsity_control='penalty', penalty_weight 0) "
                              "left every unit")
    assert "raise penalty_weight" in report.advice and "recipe=" not in report.advice
    assert "untrained" not in caplog.text and "inconclusive" not in caplog.text
    assert "did not converge: NOT converged: nothing was pruned" in caplog.text
    final = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Final masks")]
    assert final == ["Final masks: 20 of 20 units kept, sparsity 0.0000 (sparsity_control='penalty' has no target)."]
    assert "(target" not in caplog.text
    logged = [entry for entry in trainer.state.log_history if "kl" in entry]
    assert logged and not any({"sparsity_target", "lambda_1", "lambda_2"} & set(entry) for entry in logged)
    # The verdict line shows no KL comparison: the subnetwork is the full model, so random ones of its size are too.
    assert verdict_line(report.to_dict()) == ("NOT converged: nothing was pruned: the fixed penalty "
                                              "(sparsity_control='penalty', penalty_weight 0) left every unit")


def test_advice_never_repeats_the_setting_in_use():
    stuck = dict(kl=0.01, random_kl=[0.2, 0.4, 0.3], correlation=0.99, batches=4)
    assert "recipe='short'" in check_convergence(**stuck, recipe="paper").advice
    short = check_convergence(**stuck, recipe="short").advice
    assert "recipe='short'" not in short and "train longer" in short and "mask_learning_rate" in short
    unfaithful = dict(kl=0.2, random_kl=[0.2, 0.4, 0.3], correlation=0.1, batches=4)
    assert "recipe='short'" in check_convergence(**unfaithful, recipe="paper").advice
    assert "recipe='short'" not in check_convergence(**unfaithful, recipe="short").advice
    penalty = check_convergence(**unfaithful, recipe="short", control="penalty").advice
    assert "penalty_weight" in penalty and "target_sparsity" not in penalty and "recipe" not in penalty
    nothing = check_convergence(0.0, [0.0, 0.0], 1.0, 4, control="lagrangian",
                                nothing_pruned="final_binarization='threshold' (final_threshold 0.5) kept every unit")
    assert nothing.status == "not_converged" and "final_binarization='topk'" in nothing.advice


def test_an_inconclusive_penalty_run_names_the_penalty_before_the_head():
    """A penalty run on a fine-tuned MiniLM that pruned 1 unit of 78 ended "inconclusive" with the advice to prune a
    model trained for its task (it was): random subnetworks that close to the full model are faithful anyway. The
    advice now names the penalty and what it pruned first; a Lagrangian run keeps the head as the cause."""
    flat = dict(kl=4.9e-6, random_kl=[4.9e-6, 1.3e-6], correlation=0.5, batches=1)
    penalty = check_convergence(**flat, control="penalty", sparsity=1 / 78)
    assert penalty.status == "inconclusive"
    assert "The fixed penalty (sparsity_control='penalty') pruned only 1.3% of the units" in penalty.advice
    assert "raise penalty_weight" in penalty.advice
    assert penalty.advice.index("penalty_weight") < penalty.advice.index("untrained classification head")
    lagrangian = check_convergence(**flat, control="lagrangian", sparsity=0.5)
    assert "penalty" not in lagrangian.advice and "untrained classification head" in lagrangian.advice


@pytest.mark.parametrize("extra, refused", [
    (["--target_sparsity", "0.5"], "--target_sparsity does nothing under --sparsity_control penalty"),
    (["--start_sparsity", "0.1", "--reg_learning_rate", "0.1"],
     "--start_sparsity, --reg_learning_rate do nothing under --sparsity_control penalty"),
    (["--final_binarization", "topk"], "--final_binarization topk takes the top units at the target"),
])
def test_prune_refuses_target_flags_under_a_fixed_penalty(extra, refused, tmp_path, capsys):
    """`prune --sparsity_control penalty --target_sparsity 0.5` ended at sparsity 0.0 with the target silently
    dropped (and `--final_binarization topk` silently replaced by the threshold rule): refused before anything loads."""
    from hf_heuristic_core.cli import main
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    argv = ["prune", "--model", str(tmp_path / "model"), "--dataset", "d.jsonl", "--output_dir", str(tmp_path / "o"),
            "--sparsity_control", "penalty", "--penalty_weight", "1", *extra]
    assert main(argv) == 2
    assert refused in " ".join(capsys.readouterr().err.split())
    assert not (tmp_path / "o").exists()
