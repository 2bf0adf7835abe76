"""Mean activations for mean ablation: averaged over real (non-padding) tokens, accumulated in fp32.

The means are position-independent (one vector per head and per MLP block), computed on the very checkpoint being
pruned, with the full model (masks off). A fingerprint of the token ids records which data they came from.
"""

from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Mapping

import torch
from torch import nn
from tqdm.auto import tqdm


@dataclass
class MeanStatistics:
    """Running fp32 sums and the token count; divided at the end."""

    head_sums: torch.Tensor
    mlp_sums: torch.Tensor
    token_count: int = 0
    hasher: Any = field(default_factory=hashlib.sha256)

    def means(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.token_count == 0:
            raise ValueError("compute_means saw no real tokens (every attention_mask entry was 0, or the data was "
                             "empty); pass batches with input_ids and a non-empty attention_mask.")
        return self.head_sums / self.token_count, self.mlp_sums / self.token_count


def token_mask_for(x: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """The 0/1 weights of `x`'s positions, matched to its leading dims; None means every position is real."""
    if attention_mask is None or attention_mask.dim() != 2:
        return None
    leading = x.shape[:-1]
    if tuple(attention_mask.shape) == tuple(leading):
        return attention_mask
    if attention_mask.numel() == leading.numel():
        return attention_mask.reshape(leading)
    return None


def weighted_sum(x: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """Sum of `x` over every leading dim in fp32, counting only positions whose weight is 1."""
    x = x.detach().float()
    if weights is not None:
        x = x * weights.to(device=x.device, dtype=x.dtype).unsqueeze(-1)
    return x.reshape(-1, x.shape[-1]).sum(0)


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


def update_fingerprint(hasher, batch: Mapping[str, torch.Tensor]) -> None:
    for key in ("input_ids", "attention_mask"):
        value = batch.get(key)
        if isinstance(value, torch.Tensor):
            hasher.update(key.encode())
            hasher.update(value.detach().to("cpu", torch.int64).contiguous().numpy().tobytes())


def progress(iterator: Iterable, total: int | None, enabled: bool, description: str) -> Iterable:
    return tqdm(iterator, total=total, disable=not enabled, desc=description, leave=False)
