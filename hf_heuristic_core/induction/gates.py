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
  included). Which module plays which role is the slim-export map (`ArchitectureMap.slim`), so GPT-2's fused
  `c_attn` (a `Conv1D` holding q|k|v along its output, weight stored `[in, out]`) is sliced like export slices it.
  **GQA:** a key/value head is transplanted when *any* query head of its group is kept (the kept head computes with
  it; `export.plan.plan_layer` decides which key/value heads a kept head set reads). The dropped query heads of that
  group then read frozen source keys/values with their own fresh query rows.
- **neuron** masks `neurons` `[L, intermediate]`. A kept neuron transplants its rows of every MLP input projection
  (up and gate, with biases) and its column of the MLP output projection; that projection's bias stays fresh.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..architectures.registry import slim_model_types
from ..architectures.resolve import resolve_architecture, transformers_model
from ..errors import MaskShapeError, UnsupportedArchitectureError, UsageError
from ..export.fold import role_modules
from ..export.plan import plan_layer
from ..export.slim import num_kv_heads

__all__ = ["TensorSlot", "granularity_of", "parameter_gates", "tensor_slots", "validate_binary"]

UNIT_KINDS = ("heads", "mlps")
NEURON_KINDS = ("neurons",)


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
    """"weight", "unit" or "neuron": from `config` (a `PruningConfig` or a granularity name) when given, else from
    the mask keys; a disagreement between the two is an error."""
    keys = set(masks)
    if keys and keys <= set(UNIT_KINDS):
        inferred = "unit"
    elif keys and keys <= set(NEURON_KINDS):
        inferred = "neuron"
    elif keys & (set(UNIT_KINDS) | set(NEURON_KINDS)):
        raise UsageError(f"The masks mix unit/neuron kinds and parameter names ({sorted(keys)[:6]}); pass one mask "
                         "dict as get_masks() returns it for one granularity.")
    else:
        inferred = "weight"
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
    if granularity == "weight":
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
    hf_model = transformers_model(model)
    architecture = resolve_architecture(hf_model, config if not isinstance(config, str) else None)
    paths = architecture.paths
    if architecture.is_encoder_decoder or paths.slim is None:
        raise UnsupportedArchitectureError(
            f"Transplanting {granularity} masks needs to know which projection rows/columns a head or neuron owns; "
            f"that map (SlimMap) exists for {slim_model_types()}, not {architecture.model_type!r}. Use weight masks "
            "(PruningConfig(granularity='weight')), or add a SlimMap for the model in ARCHITECTURES.")
    num_layers, num_heads, head_dim = architecture.num_layers, architecture.num_heads, architecture.head_dim
    intermediate = _intermediate(architecture)
    shapes = {"heads": (num_layers, num_heads), "mlps": (num_layers,), "neurons": (num_layers, intermediate)}
    binary = {}
    for kind, mask in masks.items():
        if tuple(mask.shape) != shapes[kind]:
            raise MaskShapeError(f"The {kind!r} mask has shape {tuple(mask.shape)} but this "
                                 f"{architecture.model_type!r} model needs {shapes[kind]}; the masks come from "
                                 "another model size or architecture.")
        binary[kind] = validate_binary(kind, mask).cpu()
    names = {id(slot.parameter): slot.name for slot in slots.values()}
    gates: dict[str, torch.Tensor] = {}

    def mark(module: nn.Module, attribute: str, rows: list[int] | None = None, cols: list[int] | None = None) -> None:
        parameter = getattr(module, attribute, None)
        if parameter is None:
            return
        name = names[id(parameter)]
        gate = gates.setdefault(name, torch.zeros(parameter.shape, dtype=torch.bool, device=parameter.device))
        view = gate.t() if type(module).__name__ == "Conv1D" and gate.dim() == 2 else gate  # [out, in] view
        if rows is None and cols is None:
            view[...] = True
        elif cols is None:
            view[rows] = True
        else:
            view[:, cols] = True

    num_kv = num_kv_heads(hf_model.config, paths.slim, num_heads)
    for index, layer in enumerate(architecture.layers):
        if "heads" in binary:
            layout = plan_layer(binary["heads"][index].float(), True, num_kv, intermediate)
            kept = list(layout.kept_heads)
            kv = sorted({k for k in layout.kv_slots if k >= 0}) if kept else []
            q_rows = _features(kept, head_dim)
            kv_rows = _features(kv, head_dim)
            if q_rows:
                if paths.slim.qkv is not None:
                    fused = layer.get_submodule(paths.slim.qkv)
                    width_q, width_kv = num_heads * head_dim, num_kv * head_dim
                    rows = q_rows + [i + width_q for i in kv_rows] + [i + width_q + width_kv for i in kv_rows]
                    for attribute in ("weight", "bias"):
                        mark(fused, attribute, rows=rows)
                else:
                    for role, rows in (("query", q_rows), ("key", kv_rows), ("value", kv_rows)):
                        module = layer.get_submodule(getattr(paths.slim, role))
                        for attribute in ("weight", "bias"):
                            mark(module, attribute, rows=rows)
                for module in role_modules(layer, paths, "attention_output"):
                    mark(module, "weight", cols=q_rows)
        if "mlps" in binary and bool(binary["mlps"][index]):
            for path in paths.mlp or (paths.mlp_output,):
                for module in layer.get_submodule(path).modules():
                    for attribute in list(module._parameters):
                        mark(module, attribute)
        if "neurons" in binary:
            kept_neurons = binary["neurons"][index].nonzero().flatten().tolist()
            if kept_neurons:
                for module in role_modules(layer, paths, "mlp_inputs"):
                    for attribute in ("weight", "bias"):
                        mark(module, attribute, rows=kept_neurons)
                for module in role_modules(layer, paths, "mlp_output"):
                    mark(module, "weight", cols=kept_neurons)
    return gates


def _features(heads: list[int], head_dim: int) -> list[int]:
    return [i for h in heads for i in range(h * head_dim, (h + 1) * head_dim)]


def _intermediate(architecture: Any) -> int:
    from ..architectures.resolve import input_width

    return int(input_width(architecture.mlp_outputs[0]))
