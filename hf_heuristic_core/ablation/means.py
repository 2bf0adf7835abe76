"""Mean activations for mean ablation: averaged over real (non-padding) tokens, accumulated in fp32.

The means are position-independent (one vector per head and per MLP block), computed on the very checkpoint being
pruned, with the full model (masks off). Each site's running sum is a hook object (`ActivationMean`) with a
`state_dict()`, so partial statistics can be saved, merged or inspected. A fingerprint of the token ids records which
data the means came from.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle


__all__ = ["ActivationMean", "ActivationSite", "collect_means", "token_mask_for", "update_fingerprint",
           "weighted_sum"]


@dataclass(frozen=True)
class ActivationSite:
    """A module whose input (`where="input"`) or output (`"output"`) carries one layer's activations of a kind."""

    module: nn.Module
    where: str


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


class ActivationMean:
    """The running fp32 sum and token count of one site's activations; attach it, run data, read `mean()`."""

    def __init__(self, site: ActivationSite, token_weights: Callable[[], torch.Tensor | None],
                 device: torch.device | None = None) -> None:
        self.site = site
        self.token_weights = token_weights
        self.device = device
        self.total: torch.Tensor | None = None
        self.count = 0.0

    def attach(self) -> RemovableHandle:
        if self.site.where == "input":
            return self.site.module.register_forward_pre_hook(lambda module, args: self.update(args[0]))
        return self.site.module.register_forward_hook(lambda module, args, output: self.update(output))

    def update(self, x: torch.Tensor) -> None:
        weights = token_mask_for(x, self.token_weights())
        total = weighted_sum(x, weights)
        if self.device is not None:
            total = total.to(self.device)
        self.total = total if self.total is None else self.total + total
        self.count += float(weights.sum()) if weights is not None else float(x.shape[:-1].numel())

    def mean(self) -> torch.Tensor:
        if self.total is None or self.count == 0:
            raise ValueError("compute_means saw no real tokens (every attention_mask entry was 0, or the data was "
                             "empty); pass batches with input_ids and a non-empty attention_mask.")
        return self.total / self.count

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {"sum": self.total.detach().clone() if self.total is not None else torch.zeros(0),
                "count": torch.tensor(self.count, dtype=torch.float64)}

    def load_state_dict(self, state: Mapping[str, torch.Tensor]) -> None:
        self.total = state["sum"].clone() if state["sum"].numel() else None
        self.count = float(state["count"])


def update_fingerprint(hasher, batch: Mapping[str, torch.Tensor]) -> None:
    for key in ("input_ids", "attention_mask"):
        value = batch.get(key)
        if isinstance(value, torch.Tensor):
            hasher.update(key.encode())
            hasher.update(value.detach().to("cpu", torch.int64).contiguous().numpy().tobytes())


@torch.no_grad()
def collect_means(forward: Callable[..., Any], batches: Iterable[Mapping[str, torch.Tensor]],
                  sites: Mapping[str, list[ActivationSite]], device: torch.device,
                  accepted: set[str]) -> tuple[dict[str, list[torch.Tensor]], dict[str, Any]]:
    """Run `forward(**inputs)` over `batches` with a collector on every site; per kind, the mean of each layer's
    site, and the token count and data fingerprint."""
    current: dict[str, torch.Tensor | None] = {"mask": None}
    collectors = {kind: [ActivationMean(site, lambda: current["mask"], device) for site in layer_sites]
                  for kind, layer_sites in sites.items()}
    handles = [collector.attach() for layer_collectors in collectors.values() for collector in layer_collectors]
    hasher = hashlib.sha256()
    token_count = 0
    try:
        for batch in batches:
            inputs = {k: v.to(device) for k, v in batch.items()
                      if isinstance(v, torch.Tensor) and (not accepted or k in accepted)}
            if "input_ids" not in inputs and "inputs_embeds" not in inputs:
                raise ValueError(f"compute_means: a batch has no 'input_ids' (keys: {sorted(batch)}); "
                                 "pass tokenized batches.")
            attention_mask = inputs.get("attention_mask")
            current["mask"] = attention_mask
            reference = inputs.get("input_ids", inputs.get("inputs_embeds"))
            token_count += int(attention_mask.sum()) if attention_mask is not None \
                else int(reference.shape[0] * reference.shape[1])
            update_fingerprint(hasher, inputs)
            forward(**inputs)
    finally:
        for handle in handles:
            handle.remove()
    if token_count == 0:
        raise ValueError("compute_means saw no real tokens (every attention_mask entry was 0, or the data was "
                         "empty); pass batches with input_ids and a non-empty attention_mask.")
    means = {kind: [collector.mean() for collector in layer_collectors]
             for kind, layer_collectors in collectors.items()}
    return means, {"token_count": token_count, "data_fingerprint": hasher.hexdigest()}
