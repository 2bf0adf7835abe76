"""The arms of a Subtask Induction experiment as one-liners: `build_arm(source, masks, arm, seed)`.

- `subnetwork`: `transfer_subnetwork(source, masks, seed)`.
- `random`: a random mask with the same number of kept entries per mask tensor (`random_like_counts`), hence per
  layer, transplanted the same way. Weight masks are shuffled within each tensor; `heads` / `neurons` within each
  layer's row. `mlps` has one entry per layer, so keeping per-layer counts would reproduce the mask itself; it is
  shuffled across layers (same number of blocks).
- `random_complement`: the same, drawn only from the entries the subnetwork does not keep (disjoint from it).
- `inverse`: everything the masks cover except the subnetwork (`1 - mask` for every given mask). Tensors the masks do
  not cover stay fresh, as in the subnetwork arm, so the two arms differ only inside the masked region.
- `full`: every source weight copied (parameters and buffers) and **trainable**: the paper's full-model transfer
  fine-tunes the whole source. Masks are ignored (may be None).
- `scratch`: the fresh initialization only (masks ignored, may be None).

Every arm with the same seed draws the same fresh initialization, so arms differ only in what is transplanted.
`carry` (`transfer.CARRY_CHOICES`) applies to every masked arm alike (`subnetwork`, `random`, `random_complement`,
`inverse`): with `carry="source"` each of them starts from the source outside the tensors its masks cover (the
authors' transplant, their random arm included), with the default `"subnetwork"` from the fresh model. `full` and
`scratch` ignore it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from ..errors import UsageError
from ..granularity import per_layer_kinds
from .gates import validate_binary
from .provenance import attach_provenance
from .transfer import (
    _target,
    _transfer,
    check_carry,
    check_keeps_some,
    keep_pruned_kinds,
    source_model,
    source_tensors,
    unpack_masks,
)

__all__ = ["ARMS", "build_arm", "inverse_masks", "random_like_counts"]

ARMS = ("subnetwork", "random", "random_complement", "inverse", "full", "scratch")


def random_like_counts(masks: Mapping[str, Any], seed: int, complement: bool = False) -> dict[str, torch.Tensor]:
    """Random binary masks with the same kept count as `masks` per tensor, and per layer row for the kinds a
    granularity draws per layer (`Granularity.per_layer_kinds`: `heads`, `neurons`; see the module docstring for
    `mlps`). Same dtype and device as each input; seeded, repeatable.
    `complement=True` draws only from entries the mask does not keep (the paper's "random from the complement"),
    which needs every tensor (row) to keep at most half of its entries."""
    generator = torch.Generator().manual_seed(seed)
    row_kinds = per_layer_kinds()
    out: dict[str, torch.Tensor] = {}
    for key in sorted(masks):
        mask = validate_binary(key, torch.as_tensor(masks[key])).cpu()
        if key in row_kinds and mask.dim() == 2:
            shuffled = torch.stack([_shuffled(key, row, generator, complement) for row in mask])
        else:
            shuffled = _shuffled(key, mask.flatten(), generator, complement).view(mask.shape)
        original = torch.as_tensor(masks[key])
        out[key] = shuffled.to(device=original.device, dtype=original.dtype)
    return {key: out[key] for key in masks}


def _shuffled(key: str, flat: torch.Tensor, generator: torch.Generator, complement: bool) -> torch.Tensor:
    kept = int(flat.sum())
    pool = (~flat).nonzero().flatten() if complement else torch.arange(flat.numel())
    if kept > pool.numel():
        raise UsageError(f"The {key!r} mask keeps {kept} of {flat.numel()} entries (in one tensor or layer row), more "
                         f"than its complement holds ({pool.numel()}); a same-size random mask from the complement "
                         "does not exist. Use arm='random' (drawn from all entries).")
    result = torch.zeros(flat.numel(), dtype=torch.bool)
    result[pool[torch.randperm(pool.numel(), generator=generator)[:kept]]] = True
    return result


def inverse_masks(masks: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """`1 - mask` for every mask (same dtype and device)."""
    out = {}
    for key, value in masks.items():
        value = torch.as_tensor(value)
        out[key] = (~validate_binary(key, value)).to(dtype=value.dtype)
    return out


def build_arm(source: nn.Module, masks: Mapping[str, Any] | None, arm: str, seed: int = 0, *, config: Any = None,
              target: nn.Module | None = None, source_name: str | None = None,
              relaxation: str | None = None, carry: str = "subnetwork") -> nn.Module:
    """The model of one arm (see the module docstring); `seed` seeds the fresh initialization and, for `random`,
    the random mask. `config`, `target`, `source_name`, `relaxation`, `carry`: as in `transfer_subnetwork`. Every
    returned model carries its provenance (`model.subtask_induction`)."""
    if arm not in ARMS:
        raise UsageError(f"Unknown arm {arm!r}; choose one of {', '.join(ARMS)}.")
    check_carry(carry)
    masks, config, source_name = unpack_masks(source, masks, config, source_name)
    record = {"config": config, "source_name": source_name, "relaxation": relaxation}
    if arm in ("full", "scratch"):
        model = _target(source, target, seed)
        if arm == "full":
            _copy_everything(source_model(source), model)
        attach_provenance(model, source=source_model(source), arm=arm, seed=None if target is not None else seed,
                          gates={}, masks=None, **record)
        return model
    if masks is None:
        raise UsageError(f"arm={arm!r} needs the subnetwork's masks (prunable.get_masks(binary=True)).")
    binary = check_keeps_some(keep_pruned_kinds(masks, config))
    if arm in ("random", "random_complement"):
        binary = random_like_counts(binary, seed, complement=arm == "random_complement")
    elif arm == "inverse":
        binary = inverse_masks(binary)
    return _transfer(source, binary, seed, arm=arm, target=target, carry=carry, **record)


@torch.no_grad()
def _copy_everything(source: nn.Module, model: nn.Module) -> None:
    values = source_tensors(source)
    for name, parameter in model.named_parameters():
        if name not in values or values[name].shape != parameter.shape:
            raise UsageError(f"The source has no parameter {name!r} of shape {tuple(parameter.shape)}; its config "
                             "does not describe the model it holds.")
        parameter.copy_(values[name])
    source_buffers = dict(source.named_buffers())
    for name, buffer in model.named_buffers():
        if name in source_buffers and source_buffers[name].shape == buffer.shape:
            buffer.copy_(source_buffers[name])
