"""Batches for circuit evaluation and attribution: the model's inputs plus the columns the metric reads.

The data is small (a few hundred examples), so batches are built once and reused by every circuit size and every
ranking: the same examples, in the same order, in the same batches (resample ablation takes another example of the
same batch, so this also keeps resample ablation identical across sizes).
"""

from __future__ import annotations

from typing import Any

import torch

from ..architectures.resolve import transformers_model
from ..batching import iterate_batches, model_input_names
from ..errors import EmptyDatasetError
from .metrics import METRIC_COLUMNS, Metric

__all__ = ["MetricBatch", "metric_batches", "metric_mean"]


class MetricBatch:
    """One batch: `inputs` go to the model, `fields` (labels, answer ids, attention mask) to the metric."""

    def __init__(self, inputs: dict[str, torch.Tensor], fields: dict[str, torch.Tensor]) -> None:
        self.inputs = inputs
        self.fields = fields

    @property
    def size(self) -> int:
        return int(next(iter(self.inputs.values())).shape[0])


def metric_batches(prunable: Any, data: Any, batch_size: int = 32, collate_fn: Any = None,
                   device: torch.device | str | None = None) -> list[MetricBatch]:
    """The batches of `data` (a tokenized `datasets.Dataset`, a DataLoader or an iterable of dict batches)."""
    hf_model = transformers_model(prunable.model)
    pad_id = getattr(getattr(hf_model, "config", None), "pad_token_id", None) or 0
    batches, _ = iterate_batches(data, batch_size, pad_id, collate_fn, extra_columns=METRIC_COLUMNS)
    accepted = model_input_names(hf_model)
    device = torch.device(device) if device is not None else next(prunable.model.parameters()).device
    prepared = []
    for batch in batches:
        tensors = {k: torch.as_tensor(v).to(device) for k, v in batch.items()
                   if isinstance(v, (torch.Tensor, list, int)) and k in (*METRIC_COLUMNS, *accepted)}
        inputs = {k: v for k, v in tensors.items() if k not in METRIC_COLUMNS and (not accepted or k in accepted)}
        fields = {k: v for k, v in tensors.items() if k in METRIC_COLUMNS or k == "attention_mask"}
        if "input_ids" not in inputs and "inputs_embeds" not in inputs:
            raise ValueError(f"A batch has no 'input_ids' (keys: {sorted(batch)}); pass tokenized data.")
        prepared.append(MetricBatch(inputs, fields))
    if not prepared:
        raise EmptyDatasetError("The evaluation data has no examples; pass a non-empty tokenized dataset.")
    return prepared


@torch.no_grad()
def metric_mean(prunable: Any, batches: list[MetricBatch], metric: Metric) -> float:
    """Mean of the per-example metric over all batches, with the model's masks as they are now."""
    total, count = 0.0, 0
    for batch in batches:
        values = metric(prunable(**batch.inputs).logits, batch.fields)
        total += float(values.double().sum())
        count += int(values.numel())
    return total / count
