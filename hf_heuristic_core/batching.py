"""Batches for the package's own forward passes (means, evaluation, attention patterns): from a `datasets.Dataset`,
a `DataLoader`, one dict or any iterable of dicts; which keys the model takes; which keys are labels."""

from __future__ import annotations

import inspect
from typing import Any, Iterable, Iterator, Mapping

import torch
from torch import nn
from tqdm.auto import tqdm

__all__ = ["LABEL_KEYS", "PadCollator", "batch_size_of", "iterate_batches", "model_input_names", "progress"]

# Columns that hold labels, never model inputs of the wrapped forward (the trainer and evaluation drop them).
LABEL_KEYS = ("labels", "label", "label_ids")


def model_input_names(model: nn.Module) -> set[str]:
    """Names of the keyword arguments the model's forward accepts (so labels etc. can be dropped)."""
    try:
        parameters = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return set()
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        names = set(parameters) - {"kwargs"}
        return names | {"input_ids", "attention_mask", "token_type_ids", "position_ids"}
    return set(parameters)


def iterate_batches(data: Any, batch_size: int, pad_token_id: int, collate_fn=None,
                    extra_columns: tuple[str, ...] = ()) -> tuple[Iterator[Mapping], int | None]:
    """Batches from a `datasets.Dataset`, a `DataLoader`, a single dict, or any iterable of dicts of tensors.

    From a Dataset only the model inputs (plus `extra_columns`, e.g. labels) are kept."""
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets is a dependency
        datasets = None
    if isinstance(data, Mapping):
        return iter([data]), 1
    if datasets is not None and isinstance(data, datasets.Dataset):
        if "input_ids" not in data.column_names:
            raise ValueError(f"compute_means needs tokenized data with an 'input_ids' column; the dataset has "
                             f"{data.column_names}. Tokenize it first, e.g. dataset.map(tokenizer_fn, batched=True).")
        columns = [c for c in ("input_ids", "attention_mask", "token_type_ids", *extra_columns)
                   if c in data.column_names]
        loader = torch.utils.data.DataLoader(data.select_columns(columns), batch_size=batch_size, shuffle=False,
                                             collate_fn=collate_fn or PadCollator(pad_token_id))
        return iter(loader), len(loader)
    total = len(data) if hasattr(data, "__len__") else None
    return iter(data), total


class PadCollator:
    """Right-pads lists of token ids and builds the attention mask (for untokenized-length datasets)."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad_token_id = pad_token_id

    def __call__(self, rows: list[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        length = max(len(row["input_ids"]) for row in rows)
        batch: dict[str, torch.Tensor] = {}
        for key in rows[0]:
            if not isinstance(rows[0][key], (list, tuple)):
                batch[key] = torch.tensor([row[key] for row in rows])
                continue
            pad = self.pad_token_id if key == "input_ids" else 0
            batch[key] = torch.tensor([list(row[key]) + [pad] * (length - len(row[key])) for row in rows])
        if "attention_mask" not in batch:
            batch["attention_mask"] = torch.tensor([[1] * len(r["input_ids"]) + [0] * (length - len(r["input_ids"]))
                                                    for r in rows])
        return batch


def batch_size_of(args: tuple, kwargs: dict[str, Any]) -> int | None:
    """Batch size of a forward call, from its first batch-first tensor input (a stack called directly may get only
    hidden states, a decoding step only decoder inputs)."""
    for value in (kwargs.get("input_ids"), kwargs.get("inputs_embeds"), kwargs.get("attention_mask"),
                  kwargs.get("decoder_input_ids"), kwargs.get("decoder_inputs_embeds"), kwargs.get("hidden_states"),
                  args[0] if args else None):
        if isinstance(value, torch.Tensor) and value.dim() >= 2:
            return int(value.shape[0])
    return None


def progress(iterator: Iterable, total: int | None, enabled: bool, description: str) -> Iterable:
    return tqdm(iterator, total=total, disable=not enabled, desc=description, leave=False)
