"""`evaluate_subnetwork`: accuracy per evaluation set, agreement with the full model, and KL to it.

For HANS-style sets (2-way labels: entailment / non-entailment) scored by a 3-way NLI model, predictions are collapsed
to entailment vs anything else. Full-model logits can be cached across calls, since many subnetworks of one model are
evaluated on the same data.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterable, Mapping

import torch

from ..batching import LABEL_KEYS, iterate_batches, model_input_names
from ..losses import kl_to_teacher
from ..model import PrunableModel



def labels_of(batch: Mapping[str, Any]) -> torch.Tensor | None:
    """The batch's gold labels (`labels` or `label`), or None; shared with the study's slim report."""
    for key in LABEL_KEYS:
        value = batch.get(key)
        if isinstance(value, torch.Tensor):
            return value
    return None


def collapse_predictions(predictions: torch.Tensor, entailment_id: int) -> torch.Tensor:
    """3-way NLI predictions as HANS-style 2-way labels: 0 for entailment, 1 for anything else."""
    return (predictions != entailment_id).long()


def applied_masks(model: PrunableModel, masks: Any):
    """Temporarily apply `masks` (a dict by kind, an artifact folder / repo id, or None = as is)."""
    return model.masks_applied(masks)


@torch.no_grad()
def evaluate_subnetwork(model: PrunableModel, eval_sets: Mapping[str, Any], masks: Any = None, *,
                        batch_size: int = 32, collate_fn=None, ablation: str | None = None,
                        collapse_to_entailment: bool | Iterable[str] | str = "auto", entailment_id: int = 0,
                        full_model_cache: dict[str, list[torch.Tensor]] | None = None,
                        device: torch.device | str | None = None) -> dict[str, dict[str, float]]:
    """Evaluate the subnetwork given by `masks` (default: the model's current eval masks) on each set.

    `eval_sets` maps a name to tokenized data with a `labels` / `label` column (a `datasets.Dataset`, a `DataLoader`
    or any iterable of dict batches). Returns `{name: {"accuracy", "agreement", "kl", "num_examples"}}`: accuracy
    against the labels, agreement of argmax predictions with the full model, and KL(full || subnetwork) (batchmean).

    `collapse_to_entailment`: "auto" collapses predictions of a model with 3 or more labels on sets whose labels are
    all 0/1 (HANS-style); True / False for every set; or the names of the sets to collapse.
    `full_model_cache`: a dict reused across calls to skip recomputing the full model's logits.
    """
    if not eval_sets:
        raise ValueError("evaluate_subnetwork needs at least one evaluation set, e.g. {'id': dataset}.")
    was_training = model.training
    model.eval()
    device = torch.device(device) if device is not None else next(model.model.parameters()).device
    accepted = model_input_names(model.model)
    num_labels = getattr(model.config, "num_labels", None) or 0
    pad = getattr(model.config, "pad_token_id", None) or 0
    results: dict[str, dict[str, float]] = {}
    ablation_context = model.using_ablation(ablation) if ablation else contextlib.nullcontext()
    try:
        with applied_masks(model, masks), ablation_context:
            for name, data in eval_sets.items():
                batches, _ = iterate_batches(data, batch_size, pad, collate_fn, extra_columns=LABEL_KEYS)
                cached = full_model_cache.get(name) if full_model_cache is not None else None
                tally = _Tally()
                for index, batch in enumerate(batches):
                    tally.add(model, batch, cached[index] if cached is not None and index < len(cached) else None,
                              device, accepted)
                if full_model_cache is not None and cached is None:
                    full_model_cache[name] = tally.fresh
                results[name] = tally.entry(name, collapse_to_entailment, num_labels, entailment_id)
    finally:
        model.train(was_training)
    return results


class _Tally:
    """Running counts of one evaluation set: agreement and KL with the full model, predictions against labels."""

    def __init__(self) -> None:
        self.fresh: list[torch.Tensor] = []   # full-model logits computed here (for the cache)
        self.agree = self.count = 0
        self.kl_total = 0.0
        self.labels: list[torch.Tensor] = []
        self.predictions: list[torch.Tensor] = []

    def add(self, model: PrunableModel, batch: Mapping[str, Any], cached: torch.Tensor | None,
            device: torch.device, accepted: Any) -> None:
        labels = labels_of(batch)
        inputs = {k: v.to(device) for k, v in batch.items() if isinstance(v, torch.Tensor)
                  and k not in LABEL_KEYS and (not accepted or k in accepted)}
        if cached is not None:
            full = cached.to(device)
        else:
            with model.masks_disabled():
                full = model(**inputs).logits.float()
            self.fresh.append(full.cpu())
        # Under masks_disabled() the "subnetwork" is the full model: no second forward.
        logits = full if not model.masks_enabled else model(**inputs).logits.float()
        self.kl_total += float(kl_to_teacher(logits, full)) * logits.shape[0]
        self.agree += int((logits.argmax(-1) == full.argmax(-1)).sum())
        self.count += logits.shape[0]
        if labels is not None:
            self.labels.append(labels.cpu())
            self.predictions.append(logits.argmax(-1).cpu())

    def entry(self, name: str, collapse_to_entailment: Any, num_labels: int, entailment_id: int) -> dict[str, float]:
        count = self.count
        if count == 0:
            raise ValueError(f"Evaluation set '{name}' is empty.")
        entry = {"agreement": self.agree / count, "kl": self.kl_total / count, "num_examples": count}
        if self.labels:
            labels_all, predictions_all = torch.cat(self.labels), torch.cat(self.predictions)
            if should_collapse(collapse_to_entailment, name, num_labels, labels_all):
                predictions_all = collapse_predictions(predictions_all, entailment_id)
            entry["accuracy"] = int((predictions_all == labels_all).sum()) / count
        return entry


def should_collapse(setting: bool | Iterable[str] | str, name: str, num_labels: int, labels: torch.Tensor) -> bool:
    """Whether set `name` is scored collapsed (`collapse_to_entailment` of `evaluate_subnetwork`): "auto" when a model
    with 3 or more labels meets a set whose labels are all 0/1."""
    if setting == "auto":
        return num_labels >= 3 and bool(labels.numel()) and int(labels.max()) <= 1 and int(labels.min()) >= 0
    if isinstance(setting, bool):
        return setting
    return name in set(setting)


def full_model_accuracy(model: PrunableModel, eval_sets: Mapping[str, Any], **kwargs: Any) -> dict[str, float]:
    """Accuracy of the unmasked model per set (the reference that effective size is measured against)."""
    with model.masks_disabled():
        results = evaluate_subnetwork(model, eval_sets, **kwargs)
    return {name: entry["accuracy"] for name, entry in results.items() if "accuracy" in entry}
