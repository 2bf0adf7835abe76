"""`transfer_subnetwork`: a fresh model of the source's class with the subnetwork's weights copied in and frozen.

Zhang, Lepori & Pavlick's Subtask Induction: `theta = g * theta_src + (1 - g) * theta_new`, only the `(1 - g)` part
trains. What the rest of the model starts from is `carry` (`CARRY_CHOICES`):

- `carry="subnetwork"` (the default): only the subnetwork comes from the source; every other entry of every tensor,
  the tensors the masks do not cover included (embeddings, LayerNorms, biases, head), is the fresh initialization.
- `carry="source"`: the authors' transplant (Rock-Z/instilling-inductive-bias, `math/transfer.py` with NeuroSurgeon's
  `_init_subnet_transfer`): every tensor the masks do not cover is copied from the source and stays trainable
  (embeddings, position embeddings, LayerNorms, biases, head, buffers); only the entries of the *masked* tensors
  outside the subnetwork are freshly initialized. A masked tensor is one the masks cover, whether or not it keeps
  any entry (unit masks cover every tensor a unit of their kinds owns).
 The fresh part is the model's own initialization (`type(source)(config)`, i.e. `post_init` /
`_init_weights`) under `torch.manual_seed(seed)`, drawn inside a forked RNG so the caller's random state is not
touched. Plain `nn.Module`s without a config are deep-copied and re-initialized with every submodule's
`reset_parameters()` under the same seed. How masks become per-entry gates: `induction.gates`; how frozen entries
stay frozen under any optimizer: `induction.freezing`; saving and the provenance card: `induction.provenance`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import torch
from torch import nn
from torch.nn.utils import parametrize

from ..config import PruningConfig
from ..errors import MaskShapeError, UsageError
from ..granularity import get_granularity
from .freezing import Transplant, accept_plain_state_dicts, install_transplant
from .gates import parameter_gates, tensor_slots, validate_binary
from .provenance import attach_provenance

__all__ = ["CARRY_CHOICES", "carry_source", "check_carry", "check_keeps_some", "check_same_model", "covered_tensors",
           "fresh_model", "keep_pruned_kinds", "source_model", "source_tensors", "transfer_gates",
           "transfer_subnetwork", "unpack_masks"]

# What a transplanted model takes from the source besides the subnetwork (see the module docstring).
CARRY_CHOICES = ("subnetwork", "source")


def source_model(source: nn.Module) -> nn.Module:
    """The plain model inside a `PrunableModel` (its hooks and weight-mask parametrizations are read through)."""
    inner = getattr(source, "model", None)
    if type(source).__name__ == "PrunableModel" and isinstance(inner, nn.Module):
        return inner
    return source


@torch.no_grad()
def source_tensors(source: nn.Module) -> dict[str, torch.Tensor]:
    """The source's parameter values by plain parameter name, as the source computes with them without masks: a
    weight-mask parametrization of a `PrunableModel` is looked through (its `original`), a transplant of a model
    built here is applied (its effective weights), so names match the unwrapped, merged model."""
    values: dict[str, torch.Tensor] = {}
    for name, slot in tensor_slots(source).items():
        values[_plain_name(name)] = slot.parameter.detach()
    for module_name, module in source.named_modules():   # a transplanted source: its effective values, not w_new
        if not parametrize.is_parametrized(module):
            continue
        for attribute, plist in module.parametrizations.items():
            if any(isinstance(p, Transplant) for p in plist):
                value = plist.original.detach()
                for transform in plist:
                    value = transform(value) if isinstance(transform, Transplant) else value
                values[f"{module_name}.{attribute}" if module_name else attribute] = value
    return values


def _plain_name(name: str) -> str:
    """`a.parametrizations.weight.original` -> `a.weight`."""
    if ".parametrizations." in name and name.endswith(".original"):
        head, tail = name.split(".parametrizations.", 1)
        return f"{head}.{tail[:-len('.original')]}"
    if name.startswith("parametrizations.") and name.endswith(".original"):
        return name[len("parametrizations."):-len(".original")]
    return name


def fresh_model(source: nn.Module, seed: int) -> nn.Module:
    """The model's own initialization under `torch.manual_seed(seed)`: equal bit for bit to
    `torch.manual_seed(seed); type(source)(source.config)` (moved to the source's dtype and device)."""
    source = source_model(source)
    parameter = next(source.parameters(), None)
    if parameter is None:
        raise UsageError(f"{type(source).__name__} has no parameters, so there is nothing to transplant.")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        config = getattr(source, "config", None)
        if config is not None and hasattr(source, "post_init"):
            model = type(source)(copy.deepcopy(config))
        else:
            model = _reset_copy(source)
    return model.to(device=parameter.device, dtype=parameter.dtype) if parameter.is_floating_point() else model


def _reset_copy(source: nn.Module) -> nn.Module:
    if any(parametrize.is_parametrized(m) for m in source.modules()):
        raise UsageError("The source plain module holds parametrizations; pass the unwrapped model "
                         "(prunable.unwrap()).")
    model = copy.deepcopy(source)
    for name, module in model.named_modules():
        own = [p for p in module._parameters.values() if p is not None]
        if not own:
            continue
        reset = getattr(module, "reset_parameters", None)
        if not callable(reset):
            raise UsageError(f"Module {name or '<root>'!r} ({type(module).__name__}) has parameters but no "
                             "reset_parameters(), so a plain module cannot be freshly initialized; give the model a "
                             "config + post_init (a PreTrainedModel), or add reset_parameters().")
        reset()
    return model


def transfer_gates(source: nn.Module, gates: Mapping[str, torch.Tensor] | None, seed: int = 0,
                   model: nn.Module | None = None) -> nn.Module:
    """`model` (default: `fresh_model(source, seed)`) with its gated entries set to `source`'s and frozen. `gates`
    are bool tensors keyed by the model's parameter names; the building block of every arm."""
    model = fresh_model(source, seed) if model is None else model
    slots = tensor_slots(model)
    values = source_tensors(source_model(source))
    for name, gate in (gates or {}).items():
        value = values.get(name)
        if value is None or name not in slots:
            raise UsageError(f"The source has no parameter {name!r} (or the fresh model lacks it); the source and "
                             "the masks must come from one architecture.")
        if value.shape != slots[name].parameter.shape or gate.shape != value.shape:
            raise MaskShapeError(f"Parameter {name!r}: source shape {tuple(value.shape)}, fresh model shape "
                                 f"{tuple(slots[name].parameter.shape)}, gate shape {tuple(gate.shape)}; the source's "
                                 "config does not build the model it holds.")
    install_transplant(slots, gates or {}, {name: values[name] for name in gates or {}})
    accept_plain_state_dicts(model)
    return model


def check_keeps_some(masks: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """The masks as bool tensors; refused when not binary, or when they keep nothing or everything."""
    if not masks:
        raise UsageError("The mask dict is empty; pass the masks of a subnetwork (prunable.get_masks()).")
    binary = {k: validate_binary(k, torch.as_tensor(v)) for k, v in masks.items()}
    kept = sum(int(m.sum()) for m in binary.values())
    total = sum(m.numel() for m in binary.values())
    if kept == 0:
        raise UsageError(f"The masks keep no entry of the {len(binary)} masks, so there is no subnetwork to "
                         "transplant; that is training from scratch: build_arm(source, masks, 'scratch').")
    if kept == total:
        raise UsageError(f"The masks keep every one of their {total} entries ({len(binary)} masks), so nothing "
                         "they cover is re-initialized; that is not a subnetwork. For full-model transfer use "
                         "build_arm(source, masks, 'full'); otherwise pass the masks of a subnetwork.")
    return binary


def check_same_model(source: nn.Module, target: nn.Module) -> None:
    """Refuse a target that is not the source's architecture: another class, config or parameter shape. Config
    fields that do not change the weights (names, dtype, attention implementation, output flags) may differ."""
    source, target = source_model(source), source_model(target)
    if type(source) is not type(target):
        raise UsageError(f"The target is a {type(target).__name__} but the source a {type(source).__name__}; a "
                         "transplant needs the same architecture on both sides.")
    source_config, target_config = getattr(source, "config", None), getattr(target, "config", None)
    if source_config is not None and target_config is not None:
        a, b = source_config.to_dict(), target_config.to_dict()
        differ = sorted(k for k in set(a) | set(b) if k not in _CONFIG_IGNORED and a.get(k) != b.get(k))
        if differ:
            shown = "; ".join(f"{k}: source {a.get(k)!r}, target {b.get(k)!r}" for k in differ[:5])
            raise UsageError(f"The source and target configs differ ({shown}); build the target from the source's "
                             "config (type(source)(source.config)), or leave target=None.")
    shapes = {n: tuple(slot.parameter.shape) for n, slot in tensor_slots(target).items()}
    for name, value in source_tensors(source).items():
        if name in shapes and shapes[name] != tuple(value.shape):
            raise UsageError(f"Parameter {name!r} has shape {tuple(value.shape)} in the source but {shapes[name]} in "
                             "the target; they are not the same architecture.")
        if name not in shapes:
            raise UsageError(f"The target has no parameter {name!r}; they are not the same architecture.")


_CONFIG_IGNORED = {"_name_or_path", "name_or_path", "architectures", "transformers_version", "dtype", "torch_dtype",
                   "_attn_implementation", "_attn_implementation_autoset", "attn_implementation",
                   "output_attentions", "output_hidden_states", "return_dict", "use_cache"}


def keep_pruned_kinds(masks: Mapping[str, Any], config: Any) -> dict[str, Any]:
    """Drop the unit kinds a `PruningConfig` did not prune: `get_masks()` returns them as all ones, which would
    otherwise transplant every MLP block (prune_mlps=False) or every head (prune_heads=False)."""
    masks = dict(masks)
    if config is None or isinstance(config, str):
        return masks
    granularity = get_granularity(getattr(config, "granularity", None) or PruningConfig.granularity)
    for kind, flag in granularity.pruned_flags.items():
        if kind in masks and getattr(config, flag, True) is False:
            del masks[kind]
    return masks


def unpack_masks(source: nn.Module, masks: Any, config: Any, source_name: str | None
                 ) -> tuple[Mapping[str, Any] | None, Any, str | None]:
    """Accept a `MaskArtifact` (`read_artifact(dir)`) for `masks`: its masks, its config (unless one is given) and
    its base model name; refuse masks whose `PruningConfig` names another model type than the source's."""
    if masks is not None and not isinstance(masks, Mapping) and hasattr(masks, "masks"):
        config = config if config is not None else getattr(masks, "config", None)
        masks = masks.masks
        if source_name is None and config is not None and not isinstance(config, str):
            source_name = getattr(config, "base_model_name_or_path", None)
    wanted = getattr(config, "model_type", None) if config is not None and not isinstance(config, str) else None
    hf_config = getattr(source_model(source), "config", None)
    actual = getattr(hf_config, "model_type", None) or type(source_model(source)).__name__
    if wanted and actual and wanted != actual:
        raise MaskShapeError(f"The masks were learned on a {wanted!r} model (their PruningConfig says so) but the "
                             f"source is a {actual!r} model; transplant with the source the masks were learned on.")
    return masks, config, source_name


def transfer_subnetwork(source: nn.Module, masks: Mapping[str, Any], seed: int = 0, *, config: Any = None,
                        target: nn.Module | None = None, source_name: str | None = None,
                        relaxation: str | None = None, carry: str = "subnetwork") -> nn.Module:
    """A model of `source`'s class and config whose masked-in entries are `source`'s (frozen) and whose other
    entries are freshly initialized with `seed`: every other weight with `carry="subnetwork"` (the default), only
    the masked tensors' other entries with `carry="source"` (the authors' transplant: every tensor the masks do not
    cover is the source's, trainable; see the module docstring).

    `masks`: weight masks keyed by parameter names, or unit (`heads`, `mlps`) / neuron (`neurons`) masks as
    `PrunableModel.get_masks(binary=True)` returns them, or a `MaskArtifact` (`read_artifact(dir)`: its masks,
    config and base model name are used); `config` (the `PruningConfig` or a granularity name) says
    how to read them when the keys do not, and which unit kinds were not pruned (their all-ones masks are
    ignored). `target`: transplant into this model (same class and config; changed in place and returned) instead
    of a fresh seeded one. `source_name` and `relaxation` are recorded in the provenance (defaults: the source's
    `name_or_path`, `config.relaxation`). A mask that keeps nothing or everything is refused: use
    `build_arm(..., "scratch" / "full")`.
    """
    check_carry(carry)
    masks, config, source_name = unpack_masks(source, masks, config, source_name)
    return _transfer(source, check_keeps_some(keep_pruned_kinds(masks, config)), seed, config=config,
                     arm="subnetwork", target=target, source_name=source_name, relaxation=relaxation, carry=carry)


def check_carry(carry: str) -> str:
    """`carry` itself, or a clear error naming the choices."""
    if carry not in CARRY_CHOICES:
        raise UsageError(f"carry={carry!r} is not a transplant variant; choose 'subnetwork' (only the subnetwork "
                         "comes from the source, everything else fresh) or 'source' (the authors': every tensor the "
                         "masks do not cover is the source's, trainable; only the masked tensors' other entries "
                         "fresh).")
    return carry


def _transfer(source: nn.Module, masks: Mapping[str, torch.Tensor], seed: int, *, config: Any, arm: str,
              target: nn.Module | None, source_name: str | None, relaxation: str | None,
              carry: str = "subnetwork") -> nn.Module:
    model = _target(source, target, seed)
    gates = parameter_gates(model, masks, config)
    carried = carry_source(source, model, covered_tensors(model, masks, config, gates)) if carry == "source" else 0
    transfer_gates(source, gates, seed, model=model)
    attach_provenance(model, source=source_model(source), arm=arm, seed=None if target is not None else seed,
                      gates=gates, masks=masks, config=config, source_name=source_name, relaxation=relaxation,
                      carry=carry, carried_entries=carried)
    return model


def covered_tensors(model: nn.Module, masks: Mapping[str, torch.Tensor], config: Any,
                    gates: Mapping[str, torch.Tensor]) -> set[str]:
    """The tensors the masks cover (names as `tensor_slots` gives them): a weight mask's tensor whether or not it
    keeps an entry, and for unit / neuron masks every tensor some unit of their kinds owns (the gates of all-ones
    masks), so a layer whose heads were all dropped still counts as masked."""
    everything = {key: torch.ones(torch.as_tensor(value).shape, dtype=torch.bool) for key, value in masks.items()}
    return set(gates) | set(parameter_gates(model, everything, config))


@torch.no_grad()
def carry_source(source: nn.Module, model: nn.Module, covered: set[str]) -> int:
    """Copy every parameter of `model` outside `covered` (trainable) and every buffer from `source`; returns the
    number of parameter entries copied. A tied tensor is one slot, so its other names follow it."""
    values = source_tensors(source_model(source))
    copied = 0
    for name, slot in tensor_slots(model).items():
        if name in covered:
            continue
        value = next((values[alias] for alias in (name, *slot.aliases) if alias in values), None)
        if value is None or value.shape != slot.parameter.shape:
            raise UsageError(f"The source has no parameter {name!r} of shape {tuple(slot.parameter.shape)}, so "
                             "carry='source' cannot copy it; the source and the target must be one architecture.")
        slot.parameter.copy_(value.to(device=slot.parameter.device, dtype=slot.parameter.dtype))
        copied += value.numel()
    source_buffers = dict(source_model(source).named_buffers())
    for name, buffer in model.named_buffers():
        if name in source_buffers and source_buffers[name].shape == buffer.shape:
            buffer.copy_(source_buffers[name])
    return copied


def _target(source: nn.Module, target: nn.Module | None, seed: int) -> nn.Module:
    if target is None:
        return fresh_model(source, seed)
    check_same_model(source, target)
    return target
