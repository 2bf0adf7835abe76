"""`PruningTrainer.evaluate()` returns `eval_loss`: the KL to the full model of the subnetwork the run would return
now (logits binarized at the target sparsity). `metric_for_best_model`, `load_best_model_at_end` and early stopping
work with it."""

from __future__ import annotations

import torch
from transformers import EarlyStoppingCallback

from hf_heuristic_core import PruningTrainer, kl_to_teacher
from tiny_models import one_torch_thread  # noqa: F401  (fixture)
import pytest

from .test_trainer import batch_of, prune_args, tiny_dataset, tiny_prunable

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_eval_loss_is_the_kl_of_the_final_subnetwork(tmp_path):
    prunable = tiny_prunable()
    train, held_out = tiny_dataset(32), tiny_dataset(8, seed=5)
    trainer = PruningTrainer(model=prunable, args=prune_args(tmp_path, max_steps=4), train_dataset=train,
                             eval_dataset=held_out)
    trainer.train()
    metrics = trainer.evaluate()
    assert set(metrics) - {"epoch"} == {"eval_loss", "eval_kl", "eval_agreement", "eval_sparsity"}
    masks = trainer.final_masks()
    batch = batch_of(held_out, slice(0, 8))
    with torch.no_grad():
        prunable.eval()
        with prunable.masks_disabled():
            full = prunable(**batch).logits
        with prunable.masks_applied(masks):
            sub = prunable(**batch).logits
    assert metrics["eval_loss"] == pytest.approx(float(kl_to_teacher(sub, full)), rel=1e-5)
    assert metrics["eval_sparsity"] == 0.5
    assert metrics["eval_agreement"] == pytest.approx(float((sub.argmax(-1) == full.argmax(-1)).float().mean()))
    assert any("eval_loss" in entry for entry in trainer.state.log_history)
    named = trainer.evaluate({"a": held_out, "b": tiny_dataset(8, seed=6)})
    assert "eval_a_loss" in named and "eval_b_agreement" in named


def test_best_masks_are_loaded_at_the_end(tmp_path):
    prunable = tiny_prunable()
    args = prune_args(tmp_path, max_steps=8, eval_strategy="steps", eval_steps=2, save_strategy="steps",
                      save_steps=2, load_best_model_at_end=True, metric_for_best_model="eval_loss",
                      greater_is_better=False, convergence_check=False)
    trainer = PruningTrainer(model=prunable, args=args, train_dataset=tiny_dataset(32),
                             eval_dataset=tiny_dataset(8, seed=5))
    trainer.train()
    evals = {entry["step"]: entry["eval_loss"] for entry in trainer.state.log_history if "eval_loss" in entry}
    best_step = min(evals, key=evals.get)
    assert trainer.state.best_model_checkpoint.endswith(f"checkpoint-{best_step}")
    from safetensors.torch import load_file
    saved = load_file(str(tmp_path / f"checkpoint-{best_step}" / "masks.safetensors"))
    assert torch.equal(prunable.mask_logits.heads.detach(), saved["logits.heads"])


def test_early_stopping_stops_on_eval_loss(tmp_path):
    args = prune_args(tmp_path, max_steps=40, eval_strategy="steps", eval_steps=2, save_strategy="steps",
                      save_steps=2, load_best_model_at_end=True, metric_for_best_model="eval_loss",
                      greater_is_better=False, convergence_check=False)
    trainer = PruningTrainer(model=tiny_prunable(), args=args, train_dataset=tiny_dataset(32),
                             eval_dataset=tiny_dataset(8, seed=5),
                             callbacks=[EarlyStoppingCallback(early_stopping_patience=2,
                                                              early_stopping_threshold=100.0)])
    trainer.train()
    assert trainer.state.global_step == 6   # the first evaluation sets the best; two without a 100-point gain stop it
