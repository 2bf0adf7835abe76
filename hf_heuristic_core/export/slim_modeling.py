"""Modeling code that travels with an uneven slim folder, so that stock transformers builds it without this package.

`save_slim` copies this file (it imports only torch and transformers) into every slim folder whose layers a stock
config cannot state, followed by one subclass per head class transformers registers for the model type (e.g.
`SlimLlamaForCausalLM(SlimLayout, LlamaForCausalLM)`), and points the config's `auto_map` at them. Then

    AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)

builds the stock model at the original shapes, and, before `post_init` and before any weight is loaded, gives each
module the shapes the export recorded (`hf_heuristic_core_slim["modules"]`: weight and bias shapes, width
attributes, and which zero-input projections return their bias) and each attention module the head counts its
forward reads (`["attributes"]`). The record is written by `export_slim` from the rebuilt model itself, so it holds
whatever the export changed, for every architecture with a slim map; nothing here knows an architecture.

Inside the package, `export.fold` uses `BiasOnlyLinear` and `set_module_attribute` from here, so the rebuilt model
and a model built from this file are made of the same classes.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

RECORD_KEY = "hf_heuristic_core_slim"


class BiasOnlyLinear(nn.Linear):
    """An `nn.Linear` with no input features (an MLP with no neuron left): its output is its bias at every position,
    returned as a broadcast view. A stock zero-width Linear computes the same values with two full passes (scale the
    bias, copy it into a fresh `[tokens, hidden]` buffer), which on a busy multi-threaded CPU cost about as much as
    the layer's LayerNorm; the residual add that follows materializes the view anyway. Same parameters and state
    dict keys as the Linear it replaces, so saving and plain `from_pretrained` reloads are unchanged."""

    def reset_parameters(self) -> None:
        """Nothing to draw: the parameters always come from the Linear this one replaces."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return self.bias.expand(*input.shape[:-1], self.out_features)


def set_module_attribute(module: nn.Module, attribute: str, value: Any) -> None:
    """Set an attribute a module's forward reads. `config.<name>`: on a copy of the config that this module alone
    holds (the model's config keeps the original counts; other layers may keep other widths)."""
    if attribute.startswith("config."):
        name = attribute[len("config."):]
        config = getattr(module, "config", None)
        if config is None:
            return
        if not getattr(module, "_slim_own_config", False):
            config = copy.copy(config)
            module.config = config
            module._slim_own_config = True
        setattr(config, name, value)
    elif hasattr(module, attribute):
        setattr(module, attribute, value)


def _empty_parameter(shape: list[int], like: torch.Tensor) -> nn.Parameter:
    return nn.Parameter(torch.empty(shape, dtype=like.dtype, device=like.device), requires_grad=like.requires_grad)


def _reshape_module(base: nn.Module, path: str, spec: dict[str, Any]) -> None:
    """Give one module its recorded parameter shapes and width attributes (values come from the checkpoint)."""
    module = base.get_submodule(path)
    weight = module.weight
    module.weight = _empty_parameter(spec["weight"], weight)
    if spec.get("bias") is None:
        module.register_parameter("bias", None)
    else:
        module.bias = _empty_parameter(spec["bias"], weight)
    for name, value in spec.get("widths", {}).items():
        setattr(module, name, int(value))
    if spec.get("bias_only") and type(module) is nn.Linear:
        swapped = BiasOnlyLinear(0, module.out_features, device="meta")
        swapped.weight, swapped.bias = module.weight, module.bias
        swapped.train(module.training)
        base.set_submodule(path, swapped)


def apply_slim_layout(model: nn.Module) -> None:
    """Reshape a model built from a slim folder's config (the original shapes) to the recorded slim shapes."""
    record = getattr(model.config, RECORD_KEY, None) or {}
    modules, attributes = record.get("modules"), record.get("attributes", {})
    if modules is None:
        raise ValueError(f"This config has no '{RECORD_KEY}.modules' record of the slim shapes, so the slim model "
                         "cannot be built from it; the folder was edited or written by another version. Load it "
                         "with hf_heuristic_core.load_slim, or export it again with save_slim.")
    base = model.base_model
    for path, spec in modules.items():
        _reshape_module(base, path, spec)
    for path, values in attributes.items():
        module = base.get_submodule(path)
        for name, value in values.items():
            set_module_attribute(module, name, value)


class SlimLayout:
    """Mixed in before a stock head class: the model is reshaped to the slim layout before `post_init` (and so before
    `from_pretrained` loads the weights, which then fit)."""

    def post_init(self) -> None:
        apply_slim_layout(self)
        super().post_init()
