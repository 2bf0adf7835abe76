"""One mask per MLP intermediate neuron, applied to the MLP output projection's *input* by a pre-hook.

Masking input column j of the output projection (`down_proj`, `output.dense`, GPT-2's `mlp.c_proj`) removes neuron
j's contribution whatever the activation function or gating, so it works for every MLP the architecture map names.
Ablation is zero (the column's input becomes 0), mean (its mean over real tokens) or resample (another example's
value), exactly like heads. Kinds: `neurons` `[L, intermediate]` (per stack for encoder-decoder models:
`encoder_neurons`, `decoder_neurons`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable

import torch
from torch.utils.hooks import RemovableHandle

from ...ablation.apply import mask_block
from ...ablation.names import ABLATION_MODES
from ...architectures.resolve import input_width, resolve_architecture
from ...errors import UnsupportedArchitectureError
from ..base import ActivationSite, Granularity, MaskKind, MaskSource, OwnedUnits, UnitSizes
from .settings import NeuronSettings

__all__ = ["NeuronGranularity"]


class NeuronGranularity(Granularity):
    """MLP intermediate neurons of every stack of a Transformers model (see the module docstring)."""

    settings_class = NeuronSettings

    name = "neuron"
    ablations = ABLATION_MODES
    mask_kinds = ("neurons",)
    per_layer_kinds = ("neurons",)

    @classmethod
    def kind_shapes(cls, sizes: UnitSizes) -> dict[str, tuple[int, ...]]:
        return {"neurons": (sizes.num_layers, sizes.intermediate)}

    @classmethod
    def owned_units(cls, masks: Mapping[str, torch.Tensor], sizes: UnitSizes,
                    means: Mapping[str, torch.Tensor] | None = None) -> OwnedUnits:
        """Intermediate neurons are the units; every head is kept."""
        return OwnedUnits(neurons=masks.get("neurons"), neuron_means=(means or {}).get("neurons"))

    @classmethod
    def record_mask(cls, kind: str, mask: torch.Tensor) -> list:
        """As integers (a neuron mask is wide; "1" is shorter than "1.0")."""
        return mask.int().tolist()

    def __init__(self, model: torch.nn.Module, config: Any) -> None:
        super().__init__(model, config)
        self.architecture = resolve_architecture(model, config)
        self._plan: dict[str, tuple[MaskKind, list[torch.nn.Module]]] = {}
        for stack in self.architecture.stacks:
            widths = {input_width(module) for module in stack.mlp_outputs}
            if len(widths) != 1 or None in widths:
                raise UnsupportedArchitectureError(
                    f"The neuron granularity needs MLP output projections of one input width in every layer; "
                    f"{self.architecture.model_type!r} has {sorted(map(str, widths))}. Use granularity='weight'.")
            width = widths.pop()
            name = f"{stack.name}_neurons" if stack.name else "neurons"
            prefix = f"{stack.name[:3]}." if stack.name else ""
            kind = MaskKind(name, (stack.num_layers, width), "neurons", stack.mlp_param_count / width, stack.name,
                            means_shape=(stack.num_layers, width), label_prefix=prefix,
                            dims=("num_layers", "intermediate_size"))
            self._plan[name] = (kind, list(stack.mlp_outputs))
        self.intermediate_size = next(iter(self._plan.values()))[0].shape[1]

    def kinds(self) -> dict[str, MaskKind]:
        return {name: kind for name, (kind, _) in self._plan.items()}

    def mean_sites(self, keep_dropout: bool = False) -> dict[str, list[ActivationSite]]:
        """The MLP output projection's input (a dropout after the projection does not act on neurons)."""
        return {name: [ActivationSite(module, "input") for module in modules]
                for name, (_, modules) in self._plan.items()}

    def attach(self, source: MaskSource) -> list[RemovableHandle]:
        return [module.register_forward_pre_hook(_neuron_hook(source, name, layer))
                for name, (_, modules) in self._plan.items() for layer, module in enumerate(modules)]

    def describe(self) -> dict[str, Any]:
        arch = self.architecture
        return {"model_type": arch.model_type, "num_layers": arch.num_layers, "num_heads": arch.num_heads,
                "head_dim": arch.head_dim, "hidden_size": arch.hidden_size}


def _neuron_hook(source: MaskSource, kind: str, layer: int) -> Callable:
    def hook(module: torch.nn.Module, args: tuple) -> tuple | None:
        z = source.active_mask(kind)
        if z is None or not args:
            return None
        x = args[0]
        return (mask_block(x, z[layer], source.ablation_reference(kind, layer, x)),) + tuple(args[1:])
    return hook
