"""Which heads, key/value heads and MLP neurons each layer of a slim model keeps: pure bookkeeping, no weights.

A layer's attention is described by *slots*. Query slot `i` holds an original query head (or -1: a padding head whose
output-projection columns are zero, so it adds exactly nothing), and reads key/value slot `i // group_size`, which
holds an original key/value head (or -1: a zero placeholder). This one description covers multi-head attention
(one kv head per query head), grouped-query attention and the two awkward cases:

- **Uneven groups (GQA).** Stock attention needs the same number of query heads per key/value head. When a layer
  keeps, say, 3 query heads of one group and 1 of another, export picks the group size `r` that needs the fewest
  projection rows: each group is cut into chunks of `r` query heads, the last chunk padded with zero-output heads,
  and its key/value head is duplicated once per chunk. `r = 1` duplicates kv heads, `r = max` pads query heads;
  both are exact, and the cost is the padded heads' / duplicated kv heads' compute (counted in `extra_rows`). Only
  group sizes that keep at most the layer's original number of key/value heads are considered, so a slim model's
  KV cache is never larger than the original's (`r = max` always qualifies).
- **A layer that keeps no head.** Its attention output is the output bias, into which every head's mean was folded.
  Where the model runs exactly with zero heads (`SlimMap.zero_width_attention`: BERT-like encoders and Llama-like
  decoders, measured on torch 2.13 / transformers 5.24) the layer keeps no slot at all, except a Llama-like layer
  whose KV cache transformers reads the sequence length from (`SlimMap.cache_length_layer`, `length_layers`: layer 0
  / the first full-attention layer; a zero-head layer there reads as empty and cached generation goes wrong).
  That layer, GPT-2's (its fused projection cannot split zero-width; DistilBERT unmeasured), every layer when no
  layer keeps a head (a stock config can state 1 head but not 0), and every layer when the placeholders make the
  layout uniform (`keep_uniform`) keep one placeholder head with zero query/key/value rows and zero output columns
  (exact: it adds nothing).

**Neurons** (neuron granularity): `neurons` lists the original intermediate neurons a layer keeps (None: the whole
block, or none of it, as `keep_mlp` says). The MLP input projections keep those rows, the output projection those
columns; `intermediate` is their count (or the architecture's `min_intermediate` zero placeholders when none is kept).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import asdict, dataclass, replace
from typing import Any

import torch

__all__ = ["LayerLayout", "is_uniform", "plan_layer", "plan_layers"]


@dataclass(frozen=True)
class LayerLayout:
    """One layer of a slim model (see the module docstring). Stored in the slim model's config as a dict."""

    query_slots: tuple[int, ...]
    kv_slots: tuple[int, ...]
    kept_heads: tuple[int, ...]
    keep_mlp: bool
    intermediate: int
    added_biases: tuple[str, ...] = ()
    neurons: tuple[int, ...] | None = None

    @property
    def group_size(self) -> int:
        return len(self.query_slots) // len(self.kv_slots) if self.kv_slots else 1

    @property
    def padding_heads(self) -> int:
        """Query slots that hold no original head (zero-output padding or the placeholder of an empty layer)."""
        return sum(1 for h in self.query_slots if h < 0)

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LayerLayout:
        return cls(query_slots=tuple(data["query_slots"]), kv_slots=tuple(data["kv_slots"]),
                   kept_heads=tuple(data["kept_heads"]), keep_mlp=bool(data["keep_mlp"]),
                   intermediate=int(data["intermediate"]), added_biases=tuple(data.get("added_biases", ())),
                   neurons=None if data.get("neurons") is None else tuple(data["neurons"]))


def _chunks(heads: list[int], size: int) -> list[list[int]]:
    return [heads[i:i + size] + [-1] * max(0, size - len(heads[i:i + size])) for i in range(0, len(heads), size)]


def plan_layer(head_mask: torch.Tensor, keep_mlp: bool, num_kv_heads: int, intermediate: int,
               min_intermediate: int = 0, neuron_mask: torch.Tensor | None = None) -> LayerLayout:
    """The slots of one layer from its binary head mask `[num_heads]` (1 keeps a query head). A removed MLP block
    keeps `min_intermediate` zero placeholder neurons (0 unless the projection type cannot be zero-width).
    `neuron_mask` `[intermediate]` (1 keeps a neuron) slices the MLP's intermediate neurons instead."""
    neurons = None
    if neuron_mask is not None:
        if neuron_mask.numel() != intermediate:
            raise ValueError(f"A neuron mask of {neuron_mask.numel()} entries for an MLP of {intermediate} neurons.")
        neurons = tuple(int(j) for j in torch.nonzero(neuron_mask > 0.5).flatten())
        keep_mlp = True
        intermediate = len(neurons) or min_intermediate
    num_heads = head_mask.numel()
    if num_heads % num_kv_heads:
        raise ValueError(f"{num_heads} query heads cannot share {num_kv_heads} key/value heads evenly.")
    per_group = num_heads // num_kv_heads
    kept = [h for h in range(num_heads) if head_mask[h] > 0.5]
    groups = {k: [h for h in kept if h // per_group == k] for k in range(num_kv_heads)}
    groups = {k: heads for k, heads in groups.items() if heads}
    mlp_width = intermediate if keep_mlp else min_intermediate
    if not groups:
        return LayerLayout((-1,), (-1,), (), keep_mlp, mlp_width, neurons=neurons)
    largest = max(len(heads) for heads in groups.values())

    def cost(size: int) -> tuple[int, int]:
        kv = sum(-(-len(heads) // size) for heads in groups.values())
        return 2 * kv * size + 2 * kv, kv   # q + o rows per query slot, k + v rows per kv slot; then fewer kv slots

    # Never more key/value slots than the layer had: a duplicated kv head saves projection rows but grows the KV cache
    # beyond the original model's (a SmolLM2 export had 95 kv heads for the full model's 90). `largest` always fits.
    allowed = [r for r in range(1, largest + 1) if cost(r)[1] <= num_kv_heads]
    size = min(allowed, key=cost)
    query_slots: list[int] = []
    kv_slots: list[int] = []
    for k, heads in groups.items():
        for chunk in _chunks(heads, size):
            query_slots += chunk
            kv_slots.append(k)
    return LayerLayout(tuple(query_slots), tuple(kv_slots), tuple(kept), keep_mlp, mlp_width, neurons=neurons)


def plan_layers(head_masks: torch.Tensor, mlp_masks: torch.Tensor, num_kv_heads: int,
                intermediate: list[int], min_intermediate: int = 0,
                neuron_masks: torch.Tensor | None = None, zero_width_attention: bool = False,
                length_layers: Collection[int] = (), keep_uniform: bool = False) -> list[LayerLayout]:
    """One `LayerLayout` per layer from binary masks `[L, H]` and `[L]` (and `[L, intermediate]` neuron masks) and
    each layer's MLP width. `zero_width_attention`: a layer with no head keeps no placeholder, except the
    `length_layers` (where the KV cache reads its length by counting elements). The placeholders stay everywhere
    when no layer keeps a head (a stock config can state 1 head, not 0), and with `keep_uniform` when they make the
    layout uniform and dropping them would not (every other layer keeps one head: the folder then stays stock)."""
    layouts = [plan_layer(head_masks[layer], bool(mlp_masks[layer] > 0.5), num_kv_heads, intermediate[layer],
                          min_intermediate, None if neuron_masks is None else neuron_masks[layer])
               for layer in range(head_masks.shape[0])]
    if not zero_width_attention or not any(layout.kept_heads for layout in layouts):
        return layouts
    keep = set(length_layers)
    dropped = [layout if layout.kept_heads or index in keep else replace(layout, query_slots=(), kv_slots=())
               for index, layout in enumerate(layouts)]
    return layouts if keep_uniform and is_uniform(layouts) and not is_uniform(dropped) else dropped


def is_uniform(layouts: list[LayerLayout]) -> bool:
    """Whether every layer has the same query slots, kv slots and MLP width (what a stock config can express)."""
    shapes = {(len(lay.query_slots), len(lay.kv_slots), lay.intermediate) for lay in layouts}
    return len(shapes) == 1
