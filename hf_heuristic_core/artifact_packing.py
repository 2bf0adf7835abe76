"""Bit-packed weight masks for artifacts: one bit per masked weight (~n_params / 8 bytes).

A weight-granularity artifact of all BERT-base matrices holds ~85M mask entries: as fp32 that is 340 MB, packed it is
~11 MB. Binary tensors (`mask.<kind>`, `fixed.<kind>`) of weight kinds are stored as `packed.<key>` uint8 tensors,
their shapes taken from `PruningConfig.mask_shapes`; all-zero `forced.<kind>` tensors are left out (zero is what a
fresh model has), and fp32 logits only go in when asked (`include_logits=True`, e.g. trainer checkpoints).

A finished run's fixed mask *is* its binary mask, so a `fixed.<kind>` equal to `mask.<kind>` is not stored twice
(artifacts written before issue #36 were, at twice n_params / 8 bytes): its kind is listed in the metadata entry
`FIXED_AS_MASK` and `unpack_tensors` restores it. Older artifacts, with both tensors, read as before; a reader that does not know the
entry still gets the right masks (a binary mask with neither logits nor a fixed mask is loaded as the fixed mask).
"""

from __future__ import annotations

from typing import Iterable, Mapping

import numpy as np
import torch

from .errors import ArtifactError

__all__ = ["FIXED_AS_MASK", "PACKED_PREFIX", "pack_bits", "pack_weight_tensors", "unpack_bits", "unpack_tensors"]

PACKED_PREFIX = "packed."
# Metadata entry (a JSON list of kinds) naming the weight kinds whose fixed mask equals their binary mask.
FIXED_AS_MASK = "fixed_as_mask"


def pack_bits(mask: torch.Tensor) -> torch.Tensor:
    """A 0/1 tensor as uint8 bytes, eight entries per byte (numpy's big-endian bit order)."""
    bits = mask.detach().flatten().cpu().numpy() != 0
    return torch.from_numpy(np.packbits(bits))


def unpack_bits(packed: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    count = int(np.prod(shape)) if shape else 1
    if packed.dtype != torch.uint8 or packed.numel() != (count + 7) // 8:
        raise ArtifactError(f"A packed mask holds {packed.numel()} bytes ({packed.dtype}); shape {list(shape)} needs "
                            f"{(count + 7) // 8} uint8 bytes. The artifact is corrupt or made for another model.")
    bits = np.unpackbits(packed.numpy(), count=count)
    return torch.from_numpy(bits.astype(np.float32)).view(shape)


def _is_binary(tensor: torch.Tensor) -> bool:
    return bool(((tensor == 0) | (tensor == 1)).all())


def fixed_as_mask(tensors: Mapping[str, torch.Tensor], weight_kinds: set[str]) -> list[str]:
    """The weight kinds whose `fixed.<kind>` equals `mask.<kind>` (stored once, see the module docstring)."""
    return sorted(kind for kind in weight_kinds
                  if f"fixed.{kind}" in tensors and f"mask.{kind}" in tensors
                  and torch.equal(tensors[f"fixed.{kind}"].float(), tensors[f"mask.{kind}"].float()))


def pack_weight_tensors(tensors: Mapping[str, torch.Tensor], weight_kinds: set[str],
                        include_logits: bool, skip_fixed: Iterable[str] = ()) -> dict[str, torch.Tensor]:
    """The artifact's tensors with the weight kinds' binary tensors packed (see the module docstring); the fixed
    masks of the `skip_fixed` kinds (equal to their binary masks, `fixed_as_mask`) are left out."""
    skip = set(skip_fixed)
    out: dict[str, torch.Tensor] = {}
    for key, tensor in tensors.items():
        prefix, _, kind = key.partition(".")
        if kind not in weight_kinds:
            out[key] = tensor
        elif prefix == "fixed" and kind in skip:
            continue
        elif prefix == "logits":
            if include_logits:
                out[key] = tensor
        elif prefix == "forced":
            if bool((tensor != 0).any()):
                out[key] = tensor.to(torch.int8)
        elif prefix in ("mask", "fixed") and _is_binary(tensor):
            out[PACKED_PREFIX + key] = pack_bits(tensor)
        else:
            out[key] = tensor
    return out


def unpack_tensors(tensors: Mapping[str, torch.Tensor], shapes: Mapping[str, list[int]] | None,
                   fixed_kinds: Iterable[str] = ()) -> dict[str, torch.Tensor]:
    """Inverse of `pack_weight_tensors` (packed keys unpacked to fp32 with the config's shapes); `fixed_kinds` (the
    metadata's `FIXED_AS_MASK`) get their fixed mask back from their binary mask."""
    out: dict[str, torch.Tensor] = {}
    for key, tensor in tensors.items():
        if not key.startswith(PACKED_PREFIX):
            out[key] = tensor.float() if tensor.dtype == torch.int8 else tensor
            continue
        inner = key[len(PACKED_PREFIX):]
        kind = inner.partition(".")[2]
        if not shapes or kind not in shapes:
            raise ArtifactError(f"The artifact packs {inner!r} but its pruning_config.json has no mask shape for "
                                f"{kind!r}; the artifact is corrupt.")
        out[inner] = unpack_bits(tensor, tuple(shapes[kind]))
    for kind in fixed_kinds:
        if f"mask.{kind}" not in out:
            raise ArtifactError(f"The artifact's metadata says the fixed {kind!r} mask is its binary mask, but it "
                                "holds no binary mask for it; the artifact is corrupt.")
        out.setdefault(f"fixed.{kind}", out[f"mask.{kind}"].clone())
    return out
