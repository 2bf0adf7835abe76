"""Mean activations for mean ablation: averaged over real (non-padding) tokens, accumulated in fp32.

The means are position-independent (one vector per head and per MLP block), computed on the very checkpoint being
pruned, with the full model (masks off). Which positions of a hooked activation are real tokens is decided by
`alignment.TokenAligner` (PEFT prompt tuning and prefix tuning change the sequence length). Each site's running sum
is a hook object (`ActivationMean`) with a `state_dict()`, so partial statistics can be saved, merged or inspected.
A fingerprint of the token ids records which data the means came from.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from .alignment import TokenAligner

__all__ = ["ActivationMean", "ActivationSite", "collect_means", "update_fingerprint", "weighted_sum"]


@dataclass(frozen=True)
class ActivationSite:
    """A module whose input (`where="input"`) or output (`"output"`) carries one layer's activations of a kind;
    `stack` is `"decoder"` for decoder-side sites of an encoder-decoder model (weighted by decoder_attention_mask)."""

    module: nn.Module
    where: str
    stack: str = ""


def weighted_sum(x: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """Sum of `x` over every leading dim in fp32, counting only positions whose weight is 1."""
    x = x.detach().float()
    if weights is not None:
        x = x * weights.to(device=x.device, dtype=x.dtype).unsqueeze(-1)
    return x.reshape(-1, x.shape[-1]).sum(0)


class ActivationMean:
    """The running fp32 sum and token count of one site's activations; attach it, run data, read `mean()`.

    `token_weights(x)` gives the 0/1 weight of each position of the activation `x` (None: all count), e.g.
    `TokenAligner.weights`."""

    def __init__(self, site: ActivationSite, token_weights: Callable[[torch.Tensor], torch.Tensor | None],
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
        weights = self.token_weights(x)
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
                  accepted: set[str], aligner: TokenAligner | None = None,
                  backbone: nn.Module | Sequence[nn.Module] | None = None
                  ) -> tuple[dict[str, list[torch.Tensor]], dict[str, Any]]:
    """Run `forward(**inputs)` over `batches` with a collector on every site; per kind, the mean of each layer's
    site, and the token count and data fingerprint.

    `aligner` weights each site's positions (default: a `TokenAligner` for a model without virtual tokens);
    `backbone` is the module (or the modules, outermost first) whose received attention_mask it records: the
    first of them a forward enters gives it (see `PrunableModel.entry_modules`)."""
    aligner = aligner if aligner is not None else TokenAligner()
    collectors = {kind: [ActivationMean(site, functools.partial(aligner.weights, stack=site.stack), device)
                         for site in layer_sites]
                  for kind, layer_sites in sites.items()}
    handles = [collector.attach() for layer_collectors in collectors.values() for collector in layer_collectors]
    receivers = [backbone] if isinstance(backbone, nn.Module) else list(backbone or [])
    handles += [module.register_forward_pre_hook(aligner.capture, with_kwargs=True) for module in receivers]
    hasher = hashlib.sha256()
    token_count = 0
    try:
        for batch in batches:
            inputs = {k: v.to(device) for k, v in batch.items()
                      if isinstance(v, torch.Tensor) and (not accepted or k in accepted)}
            if "input_ids" not in inputs and "inputs_embeds" not in inputs:
                raise ValueError(f"compute_means: a batch has no 'input_ids' (keys: {sorted(batch)}); "
                                 "pass tokenized batches.")
            aligner.start_batch(inputs)
            token_count += aligner.real_token_count()
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


def after_output_dropout(sites: Mapping[str, list[ActivationSite]], mlp_kinds: Mapping[str, Any],
                         overridden: bool) -> tuple[dict[str, list[ActivationSite]], list[str]]:
    """With `keep_dropout`, MLP means are read at the output of the dropout that follows the MLP output projection
    (as in the paper's code), where the student's dropout acts. `mlp_kinds` maps each MLP kind to its resolved stack
    (`paths.mlp_output_dropout`, `layers`). Returns the new sites and the MLP kinds left at the projection (no
    dropout module of their own, or `mlp_output` overridden so the map's dropout path may not follow it)."""
    moved = dict(sites)
    kept: list[str] = []
    for kind, stack in mlp_kinds.items():
        path = getattr(stack.paths, "mlp_output_dropout", None)
        if path is None or overridden:
            kept.append(kind)
            continue
        modules = [layer.get_submodule(path) for layer in stack.layers]
        wrong = [type(module).__name__ for module in modules if not isinstance(module, nn.Dropout)]
        if wrong:
            raise TypeError(f"The MLP output dropout '{path}' of {kind!r} is a {wrong[0]}, not nn.Dropout; the "
                            "architecture map is out of date for this transformers version.")
        moved[kind] = [ActivationSite(module, "output", site.stack) for module, site in zip(modules, sites[kind])]
    return moved, kept
