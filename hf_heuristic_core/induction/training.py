"""Training and scoring a causal LM on last-token tasks with `transformers.Trainer` (Subtask Induction's loops).

`labeled_accuracy` scores exactly the positions a causal-LM loss scores (labels != -100, shifted by one), so for the
arithmetic rows it is the accuracy of the result token. `BestValidation` evaluates after every epoch and keeps the
test accuracy of the best-validation epoch: Zhang et al. keep the best validation checkpoint and report its test
accuracy; the numbers are identical without writing a checkpoint per epoch.
"""

from __future__ import annotations

import logging
import math
import tempfile
from typing import Any

import torch
from datasets import Dataset
from torch import nn
from transformers import PrinterCallback, Trainer, TrainerCallback, TrainingArguments, default_data_collator

__all__ = ["BestValidation", "labeled_accuracy", "train_last_token"]

logger = logging.getLogger(__name__)


@torch.no_grad()
def labeled_accuracy(model: nn.Module, dataset: Dataset, batch_size: int = 1024) -> float:
    """Share of labeled next-token predictions that are right (a row's label at t is predicted at t - 1)."""
    if len(dataset) == 0:
        raise ValueError("labeled_accuracy: the dataset is empty.")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    right = total = 0
    for start in range(0, len(dataset), batch_size):
        rows = dataset[start:start + batch_size]
        ids = torch.tensor(rows["input_ids"], device=device)
        labels = torch.tensor(rows["labels"], device=device)
        logits = model(input_ids=ids).logits[:, :-1]
        target = labels[:, 1:]
        scored = target != -100
        right += int(((logits.argmax(-1) == target) & scored).sum())
        total += int(scored.sum())
    model.train(was_training)
    if total == 0:
        raise ValueError("labeled_accuracy: no row has a label other than -100.")
    return right / total


class BestValidation(TrainerCallback):
    """After each epoch: validation accuracy; when it improves (strictly), the test accuracy of that epoch."""

    def __init__(self, validation: Dataset, test: Dataset | None = None) -> None:
        self.validation, self.test = validation, test
        self.best_validation = -1.0
        self.test_at_best: float | None = None
        self.best_epoch: float | None = None
        self.history: list[float] = []

    def on_epoch_end(self, args, state, control, model=None, **kwargs):
        accuracy = labeled_accuracy(model, self.validation)
        self.history.append(accuracy)
        if accuracy > self.best_validation:
            self.best_validation, self.best_epoch = accuracy, state.epoch
            self.test_at_best = labeled_accuracy(model, self.test) if self.test is not None else None
        return control


def train_last_token(model: nn.Module, train: Dataset, *, epochs: float, learning_rate: float, batch_size: int,
                     seed: int, weight_decay: float = 0.0, callbacks: list[TrainerCallback] | None = None,
                     output_dir: str | None = None) -> dict[str, Any]:
    """Train with a plain `Trainer` (AdamW, linear decay, no checkpoints); returns steps, epochs and final loss."""
    if len(train) == 0:
        raise ValueError("train_last_token: the training set is empty.")
    columns = [c for c in train.column_names if c not in ("input_ids", "labels")]
    with tempfile.TemporaryDirectory() as scratch:
        arguments = TrainingArguments(
            output_dir=output_dir or scratch, num_train_epochs=epochs, per_device_train_batch_size=batch_size,
            learning_rate=learning_rate, weight_decay=weight_decay, seed=seed, data_seed=seed, save_strategy="no",
            eval_strategy="no", logging_strategy="no", report_to=[], disable_tqdm=True, use_cpu=True,
            dataloader_num_workers=0)
        trainer = Trainer(model=model, args=arguments, train_dataset=train.remove_columns(columns),
                          data_collator=default_data_collator, callbacks=list(callbacks or []))
        trainer.remove_callback(PrinterCallback)   # the end-of-training metrics dict: the record keeps them
        output = trainer.train()
    steps = output.global_step
    steps_per_epoch = math.ceil(len(train) / batch_size)
    return {"steps": steps, "epochs": steps / steps_per_epoch, "train_loss": float(output.training_loss)}
