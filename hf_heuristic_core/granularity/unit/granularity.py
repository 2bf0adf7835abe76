"""Attention heads and MLP blocks, masked through hooks on the projections the architecture map names.

A head's mask acts on its slice of the attention output projection's *input* (the per-head context vectors, before
W_O), so it works for every attention implementation and for grouped-query attention (the masks act on query
heads). An MLP block's mask acts on the MLP output projection's *output*, before any residual add or LayerNorm.
A single-stack model has the kinds `heads` `[L, H]` and `mlps` `[L]`; an encoder-decoder model has
`encoder_heads`, `encoder_mlps`, `decoder_heads`, `cross_heads` and `decoder_mlps`, each its own shape.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Callable

import torch
from torch.utils.hooks import RemovableHandle

from ...ablation.apply import mask_block, mask_heads
from ...ablation.means import after_output_dropout
from ...architectures.resolve import ResolvedStack, resolve_architecture
from ..base import ActivationSite, Granularity, MaskKind, MaskSource, OwnedUnits, UnitSizes
from .settings import UnitSettings

logger = logging.getLogger(__name__)

__all__ = ["UnitGranularity"]

_PREFIX = {"": "", "encoder": "enc.", "decoder": "dec."}
_TITLE = {"": "", "encoder": "encoder ", "decoder": "decoder "}


class UnitGranularity(Granularity):
    """Heads and MLP blocks of every stack of a Transformers model (see the module docstring)."""

    settings_class = UnitSettings

    name = "unit"
    ablations = ("mean", "zero", "resample")
    mask_kinds = ("heads", "mlps")
    # The names of each kind's mask dimensions, for messages ("2 layers x 4 heads").
    kind_axes = {"heads": ("layers", "heads"), "mlps": ("layers",)}
    pruned_flags = {"heads": "prune_heads", "mlps": "prune_mlps"}
    per_layer_kinds = ("heads",)

    @classmethod
    def kind_shapes(cls, sizes: UnitSizes) -> dict[str, tuple[int, ...]]:
        return {"heads": (sizes.num_layers, sizes.num_heads), "mlps": (sizes.num_layers,)}

    @staticmethod
    def unit_of(kind: str, index: tuple[int, ...]) -> tuple:
        """How the analyses write one mask entry: `(layer, head)` for a head, `("mlp", layer)` for an MLP block."""
        return ("mlp", index[0]) if kind == "mlps" else tuple(index)

    @staticmethod
    def kind_and_index(unit: tuple) -> tuple[str, tuple[int, ...]]:
        """The inverse of `unit_of`: the kind and mask index of a unit in tuple form."""
        return ("mlps", (unit[1],)) if unit[0] == "mlp" else ("heads", (unit[0], unit[1]))

    @classmethod
    def shape_text(cls, config: Any) -> str | None:
        if config.num_layers and config.num_heads:
            return f"{config.num_layers} layers x {config.num_heads} heads"
        return None

    @classmethod
    def owned_units(cls, masks: Mapping[str, torch.Tensor], sizes: UnitSizes,
                    means: Mapping[str, torch.Tensor] | None = None) -> OwnedUnits:
        """Heads are query heads and MLP blocks are MLP blocks: the masks are the units."""
        means = means or {}
        return OwnedUnits(heads=masks.get("heads"), mlps=masks.get("mlps"), head_means=means.get("heads"),
                          mlp_means=means.get("mlps"))

    def __init__(self, model: torch.nn.Module, config: Any) -> None:
        super().__init__(model, config)
        self.architecture = resolve_architecture(model, config)
        # kind name -> (its MaskKind, the stack it belongs to, the modules it hooks, "input" (heads) or "output")
        self._plan: dict[str, tuple[MaskKind, ResolvedStack, list[torch.nn.Module], str]] = {}
        for stack in self.architecture.stacks:
            self._add_stack(stack)

    def _add_stack(self, stack: ResolvedStack) -> None:
        def name(role: str) -> str:
            return f"{stack.name}_{role}" if stack.name else role

        prefix, layers, heads = _PREFIX.get(stack.name, f"{stack.name}."), stack.num_layers, stack.num_heads
        self._add(MaskKind(name("heads"), (layers, heads), "heads", stack.head_param_count, stack.name,
                           means_shape=(layers, heads, stack.head_dim), label_prefix=prefix,
                           dims=("num_layers", "num_heads"), unit_group=self._query_group(stack),
                           title=f"{_TITLE.get(stack.name, stack.name + ' ')}heads"),
                  stack, stack.attention_outputs, "input")
        if stack.cross_attention_outputs:
            self._add(MaskKind("cross_heads", (layers, heads), "heads", stack.cross_head_param_count, stack.name,
                               means_shape=(layers, heads, stack.head_dim), label_prefix="cross.",
                               dims=("num_layers", "num_heads"), title="cross-attention heads"),
                      stack, stack.cross_attention_outputs, "input")
        self._add(MaskKind(name("mlps"), (layers,), "mlps", stack.mlp_param_count, stack.name,
                           means_shape=(layers, stack.hidden_size), label_prefix=prefix, dims=("num_layers",),
                           title=f"{_TITLE.get(stack.name, stack.name + ' ')}MLP blocks"),
                  stack, stack.mlp_outputs, "output")

    def _query_group(self, stack: ResolvedStack) -> int:
        """Query heads per key/value head (grouped-query attention) of a single-stack model; 1 otherwise."""
        if stack.name:
            return 1
        config = getattr(self.model, "config", None)
        text = config.get_text_config() if hasattr(config, "get_text_config") else config
        kv = getattr(text, "num_key_value_heads", None)
        if not kv or stack.num_heads % int(kv):
            return 1
        return stack.num_heads // int(kv)

    def _add(self, kind: MaskKind, stack: ResolvedStack, modules: list[torch.nn.Module], where: str) -> None:
        self._plan[kind.name] = (kind, stack, modules, where)

    def kinds(self) -> dict[str, MaskKind]:
        return {name: entry[0] for name, entry in self._plan.items()}

    def enabled(self, kind: MaskKind) -> bool:
        return bool(self.config.prune_heads if kind.role == "heads" else self.config.prune_mlps)

    def mean_sites(self, keep_dropout: bool = False) -> dict[str, list[ActivationSite]]:
        """Heads: the attention output projection's input; MLP blocks: its output, or with `keep_dropout` the output
        of the MLP's own dropout after it (as the paper's code takes them), where the architecture has one."""
        sites = {name: [ActivationSite(module, where) for module in modules]
                 for name, (_, _, modules, where) in self._plan.items()}
        if not keep_dropout:
            return sites
        blocks = {name: stack for name, (kind, stack, _, _) in self._plan.items() if kind.role == "mlps"}
        moved, kept = after_output_dropout(sites, blocks, overridden=bool(getattr(self.config, "mlp_output", None)))
        if kept:
            logger.info("keep_dropout: the MLP means of %s are taken at the MLP output projection (no dropout "
                        "module of the MLP's own in this architecture, or mlp_output overridden).", kept)
        return moved

    def attach(self, source: MaskSource) -> list[RemovableHandle]:
        handles = []
        for name, (kind, stack, modules, where) in self._plan.items():
            for layer, module in enumerate(modules):
                if where == "input":
                    handles.append(module.register_forward_pre_hook(
                        _head_hook(source, name, layer, stack.num_heads)))
                else:
                    handles.append(module.register_forward_hook(_block_hook(source, name, layer)))
        return handles

    def describe(self) -> dict[str, Any]:
        arch = self.architecture
        return {"model_type": arch.model_type, "num_layers": arch.num_layers, "num_heads": arch.num_heads,
                "head_dim": arch.head_dim, "hidden_size": arch.hidden_size}


def _head_hook(source: MaskSource, kind: str, layer: int, num_heads: int) -> Callable:
    def hook(module: torch.nn.Module, args: tuple) -> tuple | None:
        z = source.active_mask(kind)
        if z is None or not args:
            return None
        x = args[0]
        masked = mask_heads(x, z[layer], source.ablation_reference(kind, layer, x), num_heads)
        return (masked,) + tuple(args[1:])
    return hook


def _block_hook(source: MaskSource, kind: str, layer: int) -> Callable:
    def hook(module: torch.nn.Module, args: tuple, output: Any) -> Any:
        z = source.active_mask(kind)
        if z is None or not isinstance(output, torch.Tensor):
            return None
        return mask_block(output, z[layer], source.ablation_reference(kind, layer, output))
    return hook
