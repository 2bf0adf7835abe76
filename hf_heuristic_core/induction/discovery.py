"""The source side of Subtask Induction: train a model on T1, find the weights that do the subtask S, check both.

`discover_subnetwork` learns continuous-sparsification weight masks (Lepori / Zhang: s = 0 at init, beta 1 ->
beta_max multiplied per epoch, Adam on the logits only, penalty lambda * sum sigmoid(beta * s), eval mask 1[s > 0])
on the subtask's own loss through `PrunableModel(granularity="weight")`, with the source weights frozen and in eval
mode. `subnetwork_accuracy` scores a model whose weights outside a mask are zeroed by hand, independently of the
masking machinery, so a subnetwork that does not do its subtask is caught before anything is transplanted.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from datasets import Dataset
from torch import nn

from .._keywords import settings_from_keywords
from ..config import PruningConfig
from ..model import PrunableModel
from ..relaxations.continuous_sparsification import beta_after_epochs
from ..training.objectives import sparsity_penalty
from .training import labeled_accuracy

__all__ = ["SOURCE_TARGET_MODULES", "DiscoverySettings", "discover_subnetwork", "kept_fraction", "subnetwork_accuracy"]

logger = logging.getLogger(__name__)

# GPT-2: the token embedding and every attention / MLP Conv1D (c_proj matches attn.c_proj and mlp.c_proj).
SOURCE_TARGET_MODULES = ("wte", "c_attn", "c_proj", "c_fc")


@dataclass(frozen=True)
class DiscoverySettings:
    """How `discover_subnetwork` learns its masks: which modules are masked, the epochs, Adam's learning rate, the
    batch size, the penalty lambda, beta's final value, the logits' initial value and the shuffling seed."""

    target_modules: Sequence[str] = SOURCE_TARGET_MODULES
    epochs: int = 30
    learning_rate: float = 1e-2
    batch_size: int = 64
    penalty: float = 1e-6
    beta_max: float = 100.0
    init: float = 0.0
    seed: int = 0


def discover_subnetwork(model: nn.Module, data: Dataset, settings: DiscoverySettings | None = None, *,
                        save_directory: str | None = None, **keywords: Any) -> dict[str, torch.Tensor]:
    """Binary weight masks (1 = keep) for the task in `data`; `model` is returned to its unmasked state. With
    `save_directory` the masks are also written as a mask artifact (`read_artifact`, `hf-heuristic-core subtasks`).
    The settings travel as one `DiscoverySettings`; its fields are also accepted as keywords (`epochs=30`, ...)."""
    settings = settings_from_keywords("discover_subnetwork", DiscoverySettings, settings, keywords)
    if settings.epochs < 1:
        raise ValueError(f"discover_subnetwork: epochs must be >= 1 (beta is raised per epoch), got "
                         f"{settings.epochs}.")
    config = PruningConfig(granularity="weight", relaxation="continuous_sparsification",
                           granularity_settings={"target_modules": list(settings.target_modules)},
                           relaxation_settings={"cs_init": settings.init, "cs_beta_max": settings.beta_max})
    model.eval().requires_grad_(False)
    prunable = PrunableModel(model, config)
    try:
        _train_masks(prunable, model, data, settings)
        prunable.eval()
        masks = {name: mask.detach().clone() for name, mask in prunable.get_masks(binary=True).items()}
        if save_directory is not None:
            prunable.save_pretrained(save_directory)
    finally:
        prunable.unwrap()
    return masks


def _train_masks(prunable: PrunableModel, model: nn.Module, data: Dataset, settings: DiscoverySettings) -> None:
    """The epochs: beta raised per epoch, Adam on the mask logits only, the source model kept in eval mode."""
    ids = torch.tensor(data["input_ids"])
    labels = torch.tensor(data["labels"])
    generator = torch.Generator().manual_seed(settings.seed)
    optimizer = torch.optim.Adam([logits for _, logits in prunable.mask_logits.items()], lr=settings.learning_rate)
    for epoch in range(settings.epochs):
        prunable.update_relaxation(cs_beta=beta_after_epochs(epoch, settings.epochs, settings.beta_max))
        prunable.train()
        model.eval()   # the source stays in eval mode; only the mask logits train
        order = torch.randperm(len(ids), generator=generator)
        for start in range(0, len(ids), settings.batch_size):
            rows = order[start:start + settings.batch_size]
            loss = prunable(input_ids=ids[rows], labels=labels[rows]).loss
            loss = loss + sparsity_penalty(prunable, settings.penalty, len(rows))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        logger.info("subnetwork discovery epoch %d: loss %.4f, beta %.3g", epoch + 1, float(loss.detach()),
                    prunable.relaxation.beta)


def kept_fraction(masks: Mapping[str, torch.Tensor]) -> float:
    total = sum(m.numel() for m in masks.values())
    return float(sum(float(m.sum()) for m in masks.values()) / total) if total else 0.0


@torch.no_grad()
def subnetwork_accuracy(model: nn.Module, masks: Mapping[str, torch.Tensor], data: Dataset) -> float:
    """Accuracy of a copy of `model` whose masked-out weight entries are set to 0 by hand."""
    edited = copy.deepcopy(model)
    parameters = dict(edited.named_parameters())
    for name, mask in masks.items():
        if name not in parameters or parameters[name].shape != mask.shape:
            raise ValueError(f"mask {name!r} {tuple(mask.shape)} matches no parameter of the model: masks and "
                             "model come from different architectures.")
        parameters[name].mul_(mask.to(parameters[name].dtype))
    return labeled_accuracy(edited, data)


def describe_masks(masks: Mapping[str, torch.Tensor]) -> dict[str, Any]:
    return {"kept_fraction": kept_fraction(masks), "masked_entries": int(sum(m.numel() for m in masks.values())),
            "per_tensor": {name: float(m.float().mean()) for name, m in masks.items()}}
