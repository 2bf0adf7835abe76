"""Which rows and columns of which parameters a head, a key/value head, an intermediate neuron or an MLP block owns.

The one place that knows the weight layouts: an `nn.Linear` stores its weight `[out, in]`, GPT-2's `Conv1D` stores it
`[in, out]` (`is_transposed`); a fused `qkv` projection holds q | k | v along its output (GPT-2's `c_attn`,
Phi-3's `qkv_proj`, with `num_kv_heads` key/value heads under grouped-query attention), and a fused MLP input holds
`SlimMap.mlp_input_blocks` stacked copies of the intermediate (Phi-3's `gate_up_proj`: gate | up). Slim export
slices what a kept unit owns (`export.fold`); Subtask Induction gates it (`induction.gates`); both ask
`LayerOwnership`, so a new architecture quirk is a `SlimMap` field read here and nowhere else.

Row and column indices are in the `[out, in]` view; -1 stands for a zero placeholder (a padding head, an MLP with no
neuron left) that slicing fills with zeros and gating never sees.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .registry import ArchitectureMap

__all__ = ["ATTENTION_ROLES", "MLP_ROLES", "LayerOwnership", "ParameterSlice", "head_features", "is_transposed",
           "num_kv_heads", "out_in_view", "weight_out_in"]

ATTENTION_ROLES = ("query", "key", "value", "attention_output")
MLP_ROLES = ("mlp_inputs", "mlp_output")


def is_transposed(module: nn.Module) -> bool:
    """Whether `module` stores its weight `[in, out]` (Transformers' `Conv1D`, GPT-2) rather than `[out, in]`."""
    return type(module).__name__ == "Conv1D"


def weight_out_in(module: nn.Module) -> torch.Tensor:
    """The module's weight as `[out, in]` (a view for a transposed module)."""
    return module.weight.t() if is_transposed(module) else module.weight


def out_in_view(module: nn.Module, tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` (shaped like one of `module`'s parameters) in the `[out, in]` view; 1-D tensors (biases) as they are."""
    return tensor.t() if is_transposed(module) and tensor.dim() == 2 else tensor


def head_features(slots: tuple[int, ...] | list[int], head_dim: int, offset: int = 0) -> list[int]:
    """Feature indices of the heads in `slots` (each `head_dim` wide, starting at `offset`); a -1 slot gives
    `head_dim` placeholders (-1)."""
    out: list[int] = []
    for slot in slots:
        out += [-1] * head_dim if slot < 0 else list(range(offset + slot * head_dim, offset + (slot + 1) * head_dim))
    return out


def num_kv_heads(config: Any, slim: Any, num_heads: int) -> int:
    """Key/value heads per layer as the config states them (grouped-query attention), else one per query head."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    value = getattr(text, slim.kv_heads_config, None) if slim.kv_heads_config else None
    return int(value) if value else num_heads


def _shift(index: list[int], offset: int) -> list[int]:
    return [i + offset if i >= 0 else -1 for i in index]


@dataclass(frozen=True)
class ParameterSlice:
    """Entries of one parameter that a unit owns: `rows` (outputs) or `columns` (inputs) of the `[out, in]` view, or
    the whole tensor when both are None. A bias owns along its only dimension (`rows`)."""

    module: nn.Module
    attribute: str
    rows: tuple[int, ...] | None = None
    columns: tuple[int, ...] | None = None

    def fill(self, tensor: torch.Tensor, value: bool | float = True) -> None:
        """Set the owned entries of `tensor` (shaped like the parameter, e.g. its gate) to `value`, in place."""
        view = out_in_view(self.module, tensor)
        if self.rows is None and self.columns is None:
            view[...] = value
        elif self.columns is None:
            view[list(self.rows)] = value
        else:
            view[:, list(self.columns)] = value


class LayerOwnership:
    """What each unit of one layer owns, for an architecture with a `SlimMap` (see the module docstring)."""

    def __init__(self, layer: nn.Module, paths: ArchitectureMap, num_heads: int, num_kv_heads: int, head_dim: int,
                 intermediate: int | None = None) -> None:
        if paths.slim is None:
            raise ValueError("LayerOwnership needs an ArchitectureMap with a SlimMap.")
        self.layer, self.paths, self.slim = layer, paths, paths.slim
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.intermediate = intermediate

    def modules(self, role: str) -> list[nn.Module]:
        """The modules playing `role` (one of `ATTENTION_ROLES` / `MLP_ROLES`); a fused qkv plays query, key and
        value."""
        if role == "attention_output":
            return [self.layer.get_submodule(self.paths.attention_output)]
        if role == "mlp_output":
            return [self.layer.get_submodule(self.paths.mlp_output)]
        if role == "mlp_inputs":
            return [self.layer.get_submodule(path) for path in self.slim.mlp_inputs]
        return [self.layer.get_submodule(self.slim.qkv or getattr(self.slim, role))]

    # -- attention ---------------------------------------------------------------------------------------------------

    def attention_input_rows(self, query_slots: tuple[int, ...] | list[int], kv_slots: tuple[int, ...] | list[int]
                             ) -> list[tuple[nn.Module, list[int]]]:
        """The rows of the query / key / value projections that the heads in `query_slots` and the key/value heads
        in `kv_slots` own, per projection (one entry for a fused qkv, with the key and value blocks' offsets)."""
        query = head_features(query_slots, self.head_dim)
        kv = head_features(kv_slots, self.head_dim)
        if self.slim.qkv is not None:
            width_q, width_kv = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
            fused = self.layer.get_submodule(self.slim.qkv)
            return [(fused, query + _shift(kv, width_q) + _shift(kv, width_q + width_kv))]
        return [(self.layer.get_submodule(self.slim.query), query), (self.layer.get_submodule(self.slim.key), kv),
                (self.layer.get_submodule(self.slim.value), kv)]

    def head_span(self, head: int) -> slice:
        """The features of query head `head` in the attention output projection's input (its context vector)."""
        return slice(head * self.head_dim, (head + 1) * self.head_dim)

    def attention_output_columns(self, query_slots: tuple[int, ...] | list[int]) -> list[int]:
        """The output projection's input columns the heads in `query_slots` own (their context vectors)."""
        return head_features(query_slots, self.head_dim)

    def head_slices(self, heads: list[int], kv_heads: list[int]) -> list[ParameterSlice]:
        """What kept query `heads` and the key/value heads they read own: their q/k/v rows (weights and biases) and
        their output-projection columns. The output projection's bias belongs to no head."""
        slices = []
        for module, rows in self.attention_input_rows(heads, kv_heads):
            slices += [ParameterSlice(module, attribute, rows=tuple(rows)) for attribute in ("weight", "bias")]
        columns = tuple(self.attention_output_columns(heads))
        slices += [ParameterSlice(module, "weight", columns=columns) for module in self.modules("attention_output")]
        return [s for s in slices if getattr(s.module, s.attribute, None) is not None]

    # -- MLP ---------------------------------------------------------------------------------------------------------

    def mlp_input_rows(self, neurons: tuple[int, ...] | list[int]) -> list[int]:
        """The rows of each MLP input projection that the intermediate `neurons` own (-1: placeholder); a fused
        input (`mlp_input_blocks` > 1) holds one row per neuron in each of its stacked blocks."""
        blocks = self.slim.mlp_input_blocks
        if blocks == 1:
            return list(neurons)
        width = self.intermediate_width()
        return [i for block in range(blocks) for i in _shift(list(neurons), block * width)]

    def intermediate_width(self) -> int:
        """The MLP's intermediate width (the output projection's input features)."""
        if self.intermediate is None:
            self.intermediate = int(weight_out_in(self.layer.get_submodule(self.paths.mlp_output)).shape[1])
        return self.intermediate

    def neuron_slices(self, neurons: list[int]) -> list[ParameterSlice]:
        """What kept intermediate `neurons` own: their rows of every MLP input projection (with biases) and their
        columns of the output projection. The output projection's bias belongs to no neuron."""
        rows = tuple(self.mlp_input_rows(neurons))
        slices = [ParameterSlice(module, attribute, rows=rows)
                  for module in self.modules("mlp_inputs") for attribute in ("weight", "bias")]
        slices += [ParameterSlice(module, "weight", columns=tuple(neurons)) for module in self.modules("mlp_output")]
        return [s for s in slices if getattr(s.module, s.attribute, None) is not None]

    def mlp_block_slices(self) -> list[ParameterSlice]:
        """What a whole MLP block owns: every parameter of the modules the architecture map lists as its MLP
        (biases and the output projection's bias included)."""
        return [ParameterSlice(module, attribute)
                for path in self.paths.mlp or (self.paths.mlp_output,)
                for module in self.layer.get_submodule(path).modules()
                for attribute, parameter in module._parameters.items() if parameter is not None]
