"""Freezing part of a tensor in a way no optimizer can undo: `w = g * w_src + (1 - g) * w_new`.

Zeroing the gradient of frozen entries is not enough: AdamW's decoupled weight decay (and momentum from earlier
steps) moves entries whose gradient is zero. So a partly transplanted tensor is reparametrized with
`torch.nn.utils.parametrize`: the trainable parameter is `w_new` (the fresh initialization), the gate `g` and the
frozen source values are buffers, and the module sees `g * w_src + (1 - g) * w_new`, computed as
`w_new.masked_scatter(g, w_src[g])` so the frozen entries are the source's bit for bit whatever `w_new` becomes
(even inf/nan) and get no gradient. Whatever the optimizer
does to `w_new` at gated entries is invisible. A tensor transplanted entirely is a plain parameter with
`requires_grad=False` (Trainer leaves it out of the optimizer); a tensor with no gated entry stays a plain parameter.

A tied tensor (GPT-2's `wte`/`lm_head`) gets the same parametrization object on every module that holds it, over the
same `w_new` parameter, so the two uses stay one tensor.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn
from torch.nn.utils import parametrize

from .gates import TensorSlot

__all__ = ["Transplant", "accept_plain_state_dicts", "frozen_gates", "install_transplant", "is_transplanted", "merge_transplant"]


class Transplant(nn.Module):
    """The parametrization: source values where the gate is set, the trainable tensor elsewhere.

    Only the frozen values are stored (`values`, in row-major order of the gate), not a full copy of the source
    tensor: a 5% subnetwork costs 5% of the tensor plus a one-byte-per-entry gate."""

    def __init__(self, gate: torch.Tensor, source: torch.Tensor) -> None:
        super().__init__()
        gate = gate.to(device=source.device, dtype=torch.bool)
        self.register_buffer("gate", gate)
        self.register_buffer("values", source.detach()[gate].clone())

    def forward(self, fresh: torch.Tensor) -> torch.Tensor:
        return fresh.masked_scatter(self.gate, self.values)

    def right_inverse(self, value: torch.Tensor) -> torch.Tensor:
        """Assigning effective weights (e.g. `module.weight = w`) sets the trainable part; gated entries stay."""
        return value


@torch.no_grad()
def install_transplant(slots: Mapping[str, TensorSlot], gates: Mapping[str, torch.Tensor],
                       sources: Mapping[str, torch.Tensor]) -> None:
    """Freeze the gated entries of each tensor in `gates` to `sources[name]` (see the module docstring)."""
    for name, gate in gates.items():
        slot = slots[name]
        source = sources[name].to(device=slot.parameter.device, dtype=slot.parameter.dtype)
        if not bool(gate.any()):
            continue
        if bool(gate.all()):
            slot.parameter.copy_(source)
            slot.parameter.requires_grad_(False)
            continue
        transplant = Transplant(gate.to(slot.parameter.device), source)
        for module, attribute in slot.owners:
            if not parametrize.is_parametrized(module):   # merge_transplant puts the keys back in this order
                module.__dict__["_transplant_order"] = list(module._parameters)
            parametrize.register_parametrization(module, attribute, transplant, unsafe=True)


def accept_plain_state_dicts(model: nn.Module) -> None:
    """Let `model.load_state_dict` take a plain checkpoint (what `save_pretrained` writes, e.g. when a Trainer
    resumes): a tensor's plain key feeds its trainable part (`right_inverse` is the identity, so free entries get
    the saved values; frozen entries keep the source's whatever the checkpoint says), and the gate/source buffers,
    which a plain checkpoint lacks, are kept as they are."""
    if model.__dict__.get("_transplant_loading"):
        return
    model.__dict__["_transplant_loading"] = True
    model.register_load_state_dict_pre_hook(_plain_to_parametrized)


def _plain_to_parametrized(model: nn.Module, state_dict: dict, prefix: str, *args) -> None:
    names = {id(m): n for n, m in model.named_modules(remove_duplicate=False)}
    by_original: dict[int, str] = {}
    entries = []
    for module, attribute, transplant in _parametrized_all(model):
        base = prefix + _join(names[id(module)], f"parametrizations.{attribute}")
        plain = prefix + _join(names[id(module)], attribute)
        if base + ".original" not in state_dict and plain in state_dict:
            state_dict[base + ".original"] = state_dict.pop(plain)
        for buffer in ("gate", "values"):
            state_dict.setdefault(f"{base}.0.{buffer}", getattr(transplant, buffer))
        original = module.parametrizations[attribute].original
        if base + ".original" in state_dict:
            by_original.setdefault(id(original), base + ".original")
        entries.append((base + ".original", id(original)))
    for key, original in entries:    # a tied use that the plain checkpoint leaves out reads its twin's value
        if key not in state_dict and original in by_original:
            state_dict[key] = state_dict[by_original[original]]


def is_transplanted(model: nn.Module) -> bool:
    """Whether `model` holds any partly frozen (parametrized) tensor or any fully frozen parameter."""
    return bool(_parametrized(model)) or any(not p.requires_grad for p in model.parameters())


def _parametrized(model: nn.Module) -> list[tuple[nn.Module, str, Transplant]]:
    return _parametrized_all(model, remove_duplicate=True)


def _parametrized_all(model: nn.Module, remove_duplicate: bool = False) -> list[tuple[nn.Module, str, Transplant]]:
    found = []
    for module in model.modules(remove_duplicate=remove_duplicate):
        if not parametrize.is_parametrized(module):
            continue
        for attribute, plist in module.parametrizations.items():
            if any(isinstance(p, Transplant) for p in plist):
                found.append((module, attribute, next(p for p in plist if isinstance(p, Transplant))))
    return found


def frozen_gates(model: nn.Module) -> dict[str, torch.Tensor]:
    """The frozen entries of every tensor with any, keyed by the parameter names of the merged (plain) model."""
    gates: dict[str, torch.Tensor] = {}
    names = {id(m): n for n, m in model.named_modules(remove_duplicate=False)}
    seen: set[int] = set()
    for module, attribute, transplant in _parametrized(model):
        if id(transplant) in seen:
            continue
        seen.add(id(transplant))
        gates[_join(names[id(module)], attribute)] = transplant.gate.detach().cpu().clone()
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad and ".parametrizations." not in name:
            gates[name] = torch.ones(parameter.shape, dtype=torch.bool)
    return gates


def _own_class(module: nn.Module) -> None:
    """Give a parametrized module a private copy of its generated class. A deep copy of a parametrized module shares
    that class with the original, and removing a parametrization deletes the tensor's property from the class: the
    original would lose its `weight`. Merging a copy (`merge_transplant(copy.deepcopy(model))`) must not do that."""
    cls = module.__class__
    namespace = {k: v for k, v in cls.__dict__.items() if k not in ("__dict__", "__weakref__")}
    module.__class__ = type(cls.__name__, cls.__bases__, namespace)


def _join(prefix: str, attribute: str) -> str:
    return f"{prefix}.{attribute}" if prefix else attribute


@torch.no_grad()
def merge_transplant(model: nn.Module) -> nn.Module:
    """Remove the transplant parametrizations in place, leaving plain, trainable parameters holding the effective
    weights (tied tensors stay tied). Returns `model`. Nothing is frozen afterwards: this is the model to save or to
    fine-tune without constraints."""
    for module, _, _ in _parametrized(model):
        _own_class(module)
    for module, attribute, _ in _parametrized(model):
        if parametrize.is_parametrized(module, attribute):
            parametrize.remove_parametrizations(module, attribute, leave_parametrized=True)
            order = module.__dict__.get("_transplant_order", [])
            parameters = dict(module._parameters)
            module._parameters.clear()
            module._parameters.update({k: parameters[k] for k in order if k in parameters})
            module._parameters.update({k: v for k, v in parameters.items() if k not in module._parameters})
            if not parametrize.is_parametrized(module):
                module.__dict__.pop("_transplant_order", None)
    for parameter in model.parameters():
        parameter.requires_grad_(True)
    return model
