"""From a mask dict (as `PrunableModel.get_masks()` returns it) to one boolean *gate* per parameter entry.

A gate of True means "this entry is part of the subnetwork: copy it from the source and freeze it". Three kinds of
mask dicts are read:

- **weight** masks, keyed by parameter names of the unwrapped model, each of the parameter's shape. Any floating
  parameter is accepted (embeddings, biases, LayerNorms too), not only the Linear/Conv1D ones the weight granularity
  masks. A tied parameter (GPT-2's `lm_head.weight` is `transformer.wte.weight`) may be named by either name; it is
  one tensor, so its gate covers both uses.
- **unit** masks `heads` `[L, H]` / `mlps` `[L]`. A kept head transplants its query/key/value rows (and their
  biases) and its output-projection columns; the output projection's bias belongs to no head and stays fresh. A
  kept MLP block transplants every parameter of the modules the architecture map lists as its MLP (biases
  included). What each unit owns is `architectures.ownership.LayerOwnership` (the one answer export slices by),
  so GPT-2's fused `c_attn` (a `Conv1D`, weight `[in, out]`) and Phi-3's `qkv_proj` / `gate_up_proj` are gated
  like export slices them.
  **GQA:** a key/value head is transplanted when *any* query head of its group is kept (the kept head computes with
  it; `export.plan.plan_layer` decides which key/value heads a kept head set reads). The dropped query heads of that
  group then read frozen source keys/values with their own fresh query rows.
- **neuron** masks `neurons` `[L, intermediate]`. A kept neuron transplants its rows of every MLP input projection
  (up and gate, with biases) and its column of the MLP output projection; that projection's bias stays fresh.
- any other registered granularity whose masks read as those units (`Granularity.owned_units`), found by its
  `mask_kinds`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..architectures.ownership import LayerOwnership, ParameterSlice, num_kv_heads
from ..architectures.registry import slim_model_types
from ..architectures.resolve import input_width, resolve_architecture, transformers_model
from ..errors import MaskShapeError, UnsupportedArchitectureError, UsageError
from ..export.plan import plan_layer
from ..granularity import get_granularity, granularity_for_kinds
from ..granularity.base import UnitSizes

__all__ = ["TensorSlot", "granularity_of", "parameter_gates", "tensor_slots", "validate_binary"]


@dataclass(frozen=True)
class TensorSlot:
    """One parameter tensor and every (module, attribute) that holds it (more than one when weights are tied)."""

    name: str
    parameter: nn.Parameter
    owners: tuple[tuple[nn.Module, str], ...]
    aliases: tuple[str, ...]


def tensor_slots(model: nn.Module) -> dict[str, TensorSlot]:
    """Every distinct parameter of `model` under its `named_parameters()` name, with all the places holding it."""
    by_id: dict[int, list[tuple[str, nn.Module, str, nn.Parameter]]] = {}
    for module_name, module in model.named_modules(remove_duplicate=False):
        for attribute, parameter in module._parameters.items():
            if parameter is None:
                continue
            name = f"{module_name}.{attribute}" if module_name else attribute
            entries = by_id.setdefault(id(parameter), [])
            if all(e[0] != name for e in entries):
                entries.append((name, module, attribute, parameter))
    canonical = {id(p): n for n, p in model.named_parameters()}
    slots = {}
    for key, entries in by_id.items():
        name = canonical.get(key, entries[0][0])
        owners = tuple(dict.fromkeys((m, a) for _, m, a, _ in entries))
        slots[name] = TensorSlot(name, entries[0][3], owners, tuple(e[0] for e in entries))
    return slots


def granularity_of(masks: Mapping[str, Any], config: Any = None) -> str:
    """The granularity name (`"weight"`, `"unit"`, `"neuron"` or a registered one): from `config` (a
    `PruningConfig` or a granularity name) when given, else from the mask keys (`granularity_for_kinds`); a
    disagreement between the two is an error."""
    keys = set(masks)
    inferred = granularity_for_kinds(keys)
    if inferred is None:
        raise UsageError(f"The masks mix unit/neuron kinds and parameter names ({sorted(keys)[:6]}); pass one mask "
                         "dict as get_masks() returns it for one granularity.")
    given = config if isinstance(config, str) or config is None else getattr(config, "granularity", None)
    if given is not None and given != inferred:
        raise UsageError(f"config says granularity {given!r} but the mask keys {sorted(keys)[:4]} are "
                         f"{inferred!r} masks; pass the PruningConfig the masks were learned with.")
    return inferred


def validate_binary(name: str, mask: torch.Tensor) -> torch.Tensor:
    """The mask as a bool tensor; anything but exact 0/1 values is refused (soft masks have no frozen entries)."""
    if mask.dtype == torch.bool:
        return mask
    values = mask.detach()
    bad = values[(values != 0) & (values != 1)]
    if bad.numel():
        raise MaskShapeError(f"The mask {name!r} is not binary ({bad.numel()} entries are not 0 or 1, e.g. "
                             f"{float(bad[0]):.4g}); a transplant copies whole entries. Binarize it first: "
                             "prunable.get_masks(binary=True).")
    return values != 0


def parameter_gates(model: nn.Module, masks: Mapping[str, Any], config: Any = None) -> dict[str, torch.Tensor]:
    """One bool tensor of the parameter's shape per gated parameter of `model` (names as `tensor_slots` gives them).

    Parameters absent from the result have no transplanted entry."""
    if not masks:
        raise UsageError("The mask dict is empty; pass the masks of a subnetwork (prunable.get_masks()).")
    masks = {k: torch.as_tensor(v) for k, v in masks.items()}
    granularity = granularity_of(masks, config)
    slots = tensor_slots(model)
    if get_granularity(granularity).keyed_by_parameter:
        return _weight_gates(slots, masks)
    return _structured_gates(model, slots, masks, granularity, config)


def _weight_gates(slots: dict[str, TensorSlot], masks: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    alias_to_name = {alias: slot.name for slot in slots.values() for alias in slot.aliases}
    gates: dict[str, torch.Tensor] = {}
    for key, mask in masks.items():
        name = alias_to_name.get(key)
        if name is None:
            close = [n for n in slots if n.rsplit(".", 1)[-1] == key.rsplit(".", 1)[-1]][:4] or list(slots)[:4]
            raise MaskShapeError(f"The mask {key!r} names no parameter of this model (a mask for another "
                                 f"architecture, or a wrapped model's names?); valid names look like {close}.")
        shape = tuple(slots[name].parameter.shape)
        if tuple(mask.shape) != shape:
            raise MaskShapeError(f"The mask {key!r} has shape {tuple(mask.shape)} but the parameter has shape "
                                 f"{shape}; the masks come from a model of another size or architecture.")
        gate = validate_binary(key, mask).to(slots[name].parameter.device)
        if name in gates and not torch.equal(gates[name], gate):
            raise MaskShapeError(f"The masks {key!r} and another name of the same tied tensor {name!r} differ; a "
                                 "tied tensor is one set of weights, so give it one mask.")
        gates[name] = gate
    return gates


def _structured_gates(model: nn.Module, slots: dict[str, TensorSlot], masks: dict[str, torch.Tensor],
                      granularity: str, config: Any) -> dict[str, torch.Tensor]:
    """Gates of what the kept units own: the granularity reads its masks as heads / MLP blocks / neurons
    (`owned_units`), the architecture says which rows and columns each owns (`LayerOwnership`)."""
    hf_model = transformers_model(model)
    architecture = resolve_architecture(hf_model, config if not isinstance(config, str) else None)
    paths = architecture.paths
    if architecture.is_encoder_decoder or paths.slim is None:
        raise UnsupportedArchitectureError(
            f"Transplanting {granularity} masks needs to know which projection rows/columns a head or neuron owns; "
            f"that map (SlimMap) exists for {slim_model_types()}, not {architecture.model_type!r}. Use weight masks "
            "(PruningConfig(granularity='weight')), or add a SlimMap for the model in ARCHITECTURES.")
    cls = get_granularity(granularity)
    num_kv = num_kv_heads(hf_model.config, paths.slim, architecture.num_heads)
    sizes = UnitSizes(architecture.num_layers, architecture.num_heads, num_kv, architecture.head_dim,
                      int(input_width(architecture.mlp_outputs[0])))
    shapes = cls.kind_shapes(sizes)
    binary = {}
    for kind, mask in masks.items():
        if tuple(mask.shape) != shapes.get(kind):
            raise MaskShapeError(f"The {kind!r} mask has shape {tuple(mask.shape)} but this "
                                 f"{architecture.model_type!r} model needs {shapes.get(kind)}; the masks come from "
                                 "another model size or architecture.")
        binary[kind] = validate_binary(kind, mask).cpu()
    units = cls.owned_units(binary, sizes)
    if units is None:
        raise UnsupportedArchitectureError(f"The {granularity!r} granularity's masks do not read as heads, MLP blocks "
                                           "or neurons (its owned_units), so they cannot be transplanted as units; "
                                           "use weight masks.")
    names = {id(slot.parameter): slot.name for slot in slots.values()}
    gates: dict[str, torch.Tensor] = {}

    def mark(owned: list[ParameterSlice]) -> None:
        for piece in owned:
            parameter = getattr(piece.module, piece.attribute)
            name = names[id(parameter)]
            piece.fill(gates.setdefault(name, torch.zeros(parameter.shape, dtype=torch.bool,
                                                          device=parameter.device)))

    for index, layer in enumerate(architecture.layers):
        owner = LayerOwnership(layer, paths, sizes.num_heads, num_kv, sizes.head_dim, sizes.intermediate)
        if units.heads is not None:
            layout = plan_layer(units.heads[index].float(), True, num_kv, sizes.intermediate)
            kept = list(layout.kept_heads)
            if kept:
                mark(owner.head_slices(kept, sorted({k for k in layout.kv_slots if k >= 0})))
        if units.mlps is not None and bool(units.mlps[index]):
            mark(owner.mlp_block_slices())
        if units.neurons is not None:
            kept_neurons = units.neurons[index].nonzero().flatten().tolist()
            if kept_neurons:
                mark(owner.neuron_slices(kept_neurons))
    return gates
