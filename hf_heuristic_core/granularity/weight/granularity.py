"""One mask entry per parameter entry, applied with `torch.nn.utils.parametrize`: `w' = w * m`.

No modeling code is forked: each selected module's `weight` (and `bias` with `mask_bias`) becomes a parametrized
tensor that multiplies the original by this forward pass's mask. With masks off (or all ones) the product is the
original tensor bit for bit. `unwrap()` removes the parametrizations with `leave_parametrized=False`, which puts the
very same `Parameter` objects back (same ids, same values, same state-dict keys). Kinds are the masked parameters'
names in the unwrapped model's `named_parameters()` (`bert.encoder.layer.0.attention.self.query.weight`), each of
the parameter's shape, so masks work on any `torch.nn.Module`. Weight masking is zero ablation of weights.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn
from torch.nn.utils import parametrize

from ..base import Granularity, MaskKind, MaskSource
from .selection import MaskedParameter, describe_selection, layer_of, select_parameters
from .settings import WeightSettings

__all__ = ["WeightGranularity", "WeightMask"]


class WeightMask(nn.Module):
    """The parametrization: the original tensor times the active mask of one kind (None: unchanged)."""

    def __init__(self, active_mask: Callable[[str], torch.Tensor | None], kind: str) -> None:
        super().__init__()
        self._active_mask = active_mask   # a bound method, not a submodule: no reference cycle in modules()
        self.kind = kind

    def forward(self, original: torch.Tensor) -> torch.Tensor:
        mask = self._active_mask(self.kind)
        if mask is None:
            return original
        return original * mask.to(device=original.device, dtype=original.dtype)


class _ParametrizationHandle:
    """What `unwrap()` calls `remove()` on: restores the original parameter object."""

    def __init__(self, module: nn.Module, attribute: str) -> None:
        self.module, self.attribute = module, attribute
        self.order = list(module._parameters)   # re-registration appends: put the keys back in their order

    def remove(self) -> None:
        if parametrize.is_parametrized(self.module, self.attribute):
            parametrize.remove_parametrizations(self.module, self.attribute, leave_parametrized=False)
            parameters = self.module._parameters
            restored = {key: parameters[key] for key in self.order if key in parameters}
            restored.update({key: value for key, value in parameters.items() if key not in restored})
            parameters.clear()
            parameters.update(restored)


class WeightGranularity(Granularity):
    """Weights (and optionally biases) of selected Linear / Conv1D modules of any `nn.Module`."""

    settings_class = WeightSettings

    name = "weight"
    ablations = ("zero",)
    keyed_by_parameter = True

    def __init__(self, model: nn.Module, config: Any) -> None:
        super().__init__(model, config)
        settings = WeightSettings.from_config(config)
        self.selected: list[MaskedParameter] = select_parameters(
            model, settings.target_modules, settings.layers_to_transform, settings.mask_bias)
        self._kinds = {}
        for item in self.selected:
            parameter = getattr(item.module, item.attribute)
            self._kinds[item.name] = MaskKind(item.name, tuple(parameter.shape), "weights", 1.0, stack=item.name,
                                              layer_dim=None, dims=tuple(f"dim{i}" for i in range(parameter.dim())))

    def kinds(self) -> dict[str, MaskKind]:
        return dict(self._kinds)

    def layer(self, kind: str) -> int | None:
        """The transformer layer a masked parameter belongs to (from its name), or None."""
        return layer_of(kind)

    def attach(self, source: MaskSource) -> list[Any]:
        handles = []
        for item in self.selected:
            handle = _ParametrizationHandle(item.module, item.attribute)
            parametrize.register_parametrization(item.module, item.attribute,
                                                 WeightMask(source.active_mask, item.name), unsafe=True)
            handles.append(handle)
        return handles

    def describe(self) -> dict[str, Any]:
        config = getattr(self.model, "config", None)
        layers = {layer_of(item.name) for item in self.selected} - {None}
        return {"model_type": getattr(config, "model_type", None) or type(self.model).__name__,
                "num_layers": getattr(config, "num_hidden_layers", None) or (max(layers) + 1 if layers else None)}

    def selection_summary(self) -> dict[str, Any]:
        """How many tensors and entries are masked."""
        return describe_selection(self.selected)
