"""The weight-mask papers' objectives inside `PruningTrainer`: task loss, fixed penalties, chunked mask samples.

*The Heuristic Core* learns masks against the full model (KL) under a Lagrangian sparsity target; that path stays in
`PruningTrainer.compute_loss` untouched. Lepori et al. and Csordás et al. learn masks against the task loss on one
subtask's labelled data with a fixed penalty:

    objective="task":    CE(subnetwork(x), y)       (labels from the batch; causal LMs: next-token CE)
    objective="task+kl": CE + KL(full || subnetwork)
    sparsity_control="penalty":    + weight * relaxation.penalty(logits)
        continuous sparsification: lambda * sum sigmoid(beta * s)            (Lepori: lambda = 1e-8)
        gumbel_sigmoid:            alpha * sum l / batch_size                (Csordás' code; alpha = 1e-4 add/mul)
        hard_concrete:             weight * sum P(z != 0)                    (no default: pass penalty_weight)
    sparsity_control="lagrangian": + lambda1 (t - c) + lambda2 (t - c)^2 on the expected sparsity (every relaxation)

With `PruningConfig.mask_samples = n > 1` (Gumbel-sigmoid: 4) the batch is split into n chunks and each chunk's forward
draws its own mask sample, as in Csordás' code; the chunk losses are averaged by size. The continuous-sparsification
beta schedule (x beta_max^(1/E) at every epoch end) is the `BetaSchedule` callback the relaxation adds
(`Relaxation.training_callbacks`). Base weights stay frozen.
Final binarization: top-k at `target_sparsity` under the Lagrangian; under a fixed penalty (no target) the paper's
threshold rule (1[s > 0], 1[l > 0]); `prunable.get_masks(sparsity=...)` gives top-k at any target afterwards.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
import torch.nn.functional as F

from ..batching import LABEL_KEYS
from ..errors import PruningError
from ..relaxations import RELAXATION_SETTINGS, relaxation_settings_class
from ..relaxations.continuous_sparsification.schedule import BetaSchedule  # noqa: F401 (its old home)
from .losses import kl_to_teacher
from .judging import EXAMPLE_INDEX_COLUMN

logger = logging.getLogger(__name__)

__all__ = ["BetaSchedule", "DEFAULT_PENALTY_WEIGHTS", "MaskObjective", "split_batch", "sparsity_penalty", "task_loss"]

# The built-in relaxations' paper penalty weights (each relaxation's settings say its own: `default_penalty_weight`).
DEFAULT_PENALTY_WEIGHTS = {name: RELAXATION_SETTINGS.lookup(name).default_penalty_weight
                           for name in RELAXATION_SETTINGS.names()
                           if RELAXATION_SETTINGS.lookup(name).default_penalty_weight is not None}
OBJECTIVES = ("kl", "task", "task+kl")
SPARSITY_CONTROLS = ("lagrangian", "penalty")


def task_loss(logits: torch.Tensor, labels: torch.Tensor | None, input_ids: torch.Tensor | None = None,
              attention_mask: torch.Tensor | None = None) -> torch.Tensor:
    """Cross-entropy of the subnetwork on the task's labels, in fp32.

    `[batch, classes]` logits: CE against `labels`. `[batch, seq, vocab]` logits: next-token CE against `labels`
    (or, without labels, `input_ids` with padding ignored), the usual causal-LM shift, -100 ignored.
    """
    logits = logits.float()
    if logits.dim() == 2:
        if labels is None:
            raise PruningError("objective='task' needs labels in every batch (a 'label' or 'labels' column); the "
                               "batch has none. Keep the label column, or use objective='kl'.")
        if labels.dtype.is_floating_point:
            return F.mse_loss(logits.squeeze(-1), labels.float()) if logits.shape[-1] == 1 else \
                F.cross_entropy(logits, labels)
        return F.cross_entropy(logits, labels.long())
    if labels is None:
        if input_ids is None:
            raise PruningError("objective='task' on per-token logits needs labels or input_ids.")
        labels = input_ids.masked_fill(attention_mask == 0, -100) if attention_mask is not None else input_ids
    return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1).long(),
                           ignore_index=-100)


def sparsity_penalty(prunable: Any, weight: float, batch_size: int) -> torch.Tensor:
    """The relaxation's fixed penalty over every learned mask, times `weight` (Gumbel-sigmoid: / batch size)."""
    relaxation = prunable.relaxation
    total = torch.stack([relaxation.penalty(logits.float()) for _, logits in prunable.mask_logits.items()]).sum()
    if relaxation.penalty_per_example:
        total = total / max(batch_size, 1)
    return weight * total


def split_batch(inputs: dict[str, Any], chunks: int) -> list[dict[str, Any]]:
    """`inputs` cut into up to `chunks` parts along the batch dimension (tensors only; others are shared)."""
    sizes = {v.shape[0] for v in inputs.values() if isinstance(v, torch.Tensor) and v.dim() > 0}
    if len(sizes) != 1:
        return [inputs]
    batch = sizes.pop()
    parts = min(chunks, batch)
    pieces = {k: torch.tensor_split(v, parts) if isinstance(v, torch.Tensor) and v.dim() > 0 else [v] * parts
              for k, v in inputs.items()}
    return [{k: pieces[k][i] for k in inputs} for i in range(parts)]


class MaskObjective:
    """The objective of one `PruningTrainer` run, resolved from its arguments and the model's relaxation."""

    def __init__(self, trainer: Any) -> None:
        args, prunable = trainer.args, trainer.prunable
        self.trainer = trainer
        self.objective = getattr(args, "objective", "kl")
        self.control = getattr(args, "sparsity_control", "lagrangian")
        if self.objective not in OBJECTIVES or self.control not in SPARSITY_CONTROLS:
            raise PruningError(f"objective must be one of {OBJECTIVES} and sparsity_control one of "
                               f"{SPARSITY_CONTROLS}; got {self.objective!r}, {self.control!r}.")
        relaxation = prunable.pruning_config.relaxation
        self.penalty_weight = getattr(args, "penalty_weight", None)
        if self.control == "penalty" and self.penalty_weight is None:
            self.penalty_weight = relaxation_settings_class(relaxation).default_penalty_weight
            if self.penalty_weight is None:
                raise PruningError(f"sparsity_control='penalty' with the {relaxation!r} relaxation has no paper "
                                   "default; pass penalty_weight (or use sparsity_control='lagrangian').")
        if self.control == "penalty":   # no target to take the top-k at: the relaxation's own (paper) rule
            args.final_binarization = "threshold"
        self.samples = int(prunable.pruning_config.mask_samples or 1)
        for callback in prunable.relaxation.training_callbacks(prunable):   # e.g. continuous sparsification's beta
            trainer.add_callback(callback)

    @property
    def is_default(self) -> bool:
        """The Heuristic Core's path (KL, Lagrangian, one mask sample): `PruningTrainer.compute_loss` as it was."""
        return self.objective == "kl" and self.control == "lagrangian" and self.samples == 1

    def compute_loss(self, model: Any, inputs: dict[str, Any], return_outputs: bool = False) -> Any:
        trainer, prunable = self.trainer, self.trainer.prunable
        inputs = dict(inputs)
        labels = next((inputs.get(key) for key in ("labels", "label", "label_ids") if key in inputs), None)
        for key in LABEL_KEYS:
            inputs.pop(key, None)
        if labels is not None:
            inputs["__labels"] = labels
        if model.training:
            trainer._one_noise_draw_per_step()
        chunks = split_batch(inputs, self.samples) if model.training and self.samples > 1 else [inputs]
        batch = sum(_batch_size(chunk) for chunk in chunks)
        loss = task_total = kl_total = 0.0
        outputs = None
        for chunk in chunks:
            chunk = dict(chunk)
            chunk_labels = chunk.pop("__labels", None)
            example_index = chunk.pop(EXAMPLE_INDEX_COLUMN, None)
            weight = _batch_size(chunk) / max(batch, 1)
            teacher = None
            if "kl" in self.objective and trainer.args.teacher != "cached":
                teacher = trainer.teacher_logits(chunk, example_index)
            outputs = model(**chunk)
            student = outputs.logits if hasattr(outputs, "logits") else outputs
            if "task" in self.objective:
                part = task_loss(student, chunk_labels, chunk.get("input_ids"), chunk.get("attention_mask"))
                task_total = task_total + weight * part.detach()
                loss = loss + weight * part
            if "kl" in self.objective:
                if teacher is None:
                    teacher = trainer.teacher_logits(chunk, example_index, student_like=student)
                part = kl_to_teacher(student, teacher, chunk.get("attention_mask"), trainer.args.kl_temperature,
                                     chunk_size=getattr(trainer.args, "kl_chunk_size", None))
                kl_total = kl_total + weight * part.detach()
                loss = loss + weight * part
        expected = prunable.expected_sparsity()
        if self.control == "penalty":
            penalty = sparsity_penalty(prunable, self.penalty_weight, batch)
        else:
            sampled = prunable.sampled_sparsity() if len(chunks) == 1 else None
            current = sampled if (trainer.args.sparsity_penalty == "sampled" and sampled is not None) else expected
            penalty = trainer.lagrangian.penalty(trainer.current_target() - current)
        loss = loss + penalty
        if model.training:
            if not bool(torch.isfinite(loss)):
                trainer._stop_on_nonfinite(torch.as_tensor(kl_total if "kl" in self.objective else task_total))
            trainer._record(kl=torch.as_tensor(kl_total, dtype=torch.float32), sampled=expected, expected=expected,
                            task_loss=torch.as_tensor(task_total, dtype=torch.float32), penalty=penalty)
        return (loss, outputs) if return_outputs else loss


def _batch_size(inputs: dict[str, Any]) -> int:
    for value in inputs.values():
        if isinstance(value, torch.Tensor) and value.dim() > 0:
            return int(value.shape[0])
    return 1
