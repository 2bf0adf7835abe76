"""Attention heads and MLP blocks, masked through hooks on the projections the architecture map names.

A head's mask acts on its slice of the attention output projection's *input* (the per-head context vectors, before
W_O), so it works for every attention implementation and for grouped-query attention (the masks act on query
heads). An MLP block's mask acts on the MLP output projection's *output*, before any residual add or LayerNorm.
A single-stack model has the kinds `heads` `[L, H]` and `mlps` `[L]`; an encoder-decoder model has
`encoder_heads`, `encoder_mlps`, `decoder_heads`, `cross_heads` and `decoder_mlps`, each its own shape.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any, Callable

import torch
from torch.utils.hooks import RemovableHandle

from ...ablation.apply import mask_block, mask_heads
from ...ablation.names import ABLATION_MODES
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
    ablations = ABLATION_MODES
    # The single-stack kinds by role: the analyses, reports and artifacts ask for them by these names.
    head_kind = "heads"
    block_kind = "mlps"
    mask_kinds = (head_kind, block_kind)
    # The names of each kind's mask dimensions, for messages ("2 layers x 4 heads").
    kind_axes = {head_kind: ("layers", "heads"), block_kind: ("layers",)}
    pruned_flags = {head_kind: "prune_heads", block_kind: "prune_mlps"}
    per_layer_kinds = (head_kind,)
    # An MLP block written as a unit: `("mlp", layer)`, labelled "L3.MLP" (a head is `(layer, head)`, "L4.H0").
    block_marker = "mlp"
    _LABEL = re.compile(r"^\s*L(?P<layer>\d+)\s*[.\s_-]?\s*(?:H(?P<head>\d+)|(?P<mlp>MLP))\s*$", re.IGNORECASE)

    @classmethod
    def kind_shapes(cls, sizes: UnitSizes) -> dict[str, tuple[int, ...]]:
        return {cls.head_kind: (sizes.num_layers, sizes.num_heads), cls.block_kind: (sizes.num_layers,)}

    @classmethod
    def unit_of(cls, kind: str, index: tuple[int, ...]) -> tuple:
        """How the analyses write one mask entry: `(layer, head)` for a head, `("mlp", layer)` for an MLP block."""
        return (cls.block_marker, index[0]) if kind == cls.block_kind else tuple(index)

    @classmethod
    def kind_and_index(cls, unit: tuple) -> tuple[str, tuple[int, ...]]:
        """The inverse of `unit_of`: the kind and mask index of a unit in tuple form."""
        return (cls.block_kind, (unit[1],)) if unit[0] == cls.block_marker else (cls.head_kind, (unit[0], unit[1]))

    @classmethod
    def unit_label(cls, unit: tuple) -> str:
        """"L4.H0" for head (4, 0), "L3.MLP" for ("mlp", 3) (a unit in tuple form)."""
        return f"L{unit[1]}.MLP" if unit[0] == cls.block_marker else f"L{unit[0]}.H{unit[1]}"

    @classmethod
    def parse_unit(cls, unit: Any) -> tuple:
        """A unit from "L4.H0" / "L4H0" / "L3.MLP", `(4, 0)` or `("mlp", 3)`; always returns the tuple form."""
        if isinstance(unit, str):
            match = cls._LABEL.match(unit)
            if match is None:
                raise ValueError(f"Cannot read unit {unit!r}: write heads as 'L4.H0' and MLP blocks as 'L3.MLP'.")
            layer = int(match["layer"])
            return (cls.block_marker, layer) if match["mlp"] else (layer, int(match["head"]))
        if isinstance(unit, (tuple, list)) and len(unit) == 2:
            if isinstance(unit[0], str) and unit[0].lower() == cls.block_marker:
                return (cls.block_marker, int(unit[1]))
            if not isinstance(unit[0], str):
                return (int(unit[0]), int(unit[1]))
        raise ValueError(f"Cannot read unit {unit!r}: pass (layer, head), ('mlp', layer) or a label like 'L4.H0'.")

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
        return OwnedUnits(heads=masks.get(cls.head_kind), mlps=masks.get(cls.block_kind),
                          head_means=means.get(cls.head_kind), mlp_means=means.get(cls.block_kind))

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
        settings = UnitSettings.from_config(self.config)
        return bool(settings.prune_heads if kind.role == "heads" else settings.prune_mlps)

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
