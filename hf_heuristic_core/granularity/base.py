"""What a mask granularity provides, so that `PrunableModel` can orchestrate any of them the same way.

A granularity says which *kinds* of masks a model has and their shapes (`MaskKind`: heads `[L, H]`, MLP blocks
`[L]`, or the encoder / decoder / cross-attention heads of a seq2seq model, each its own kind), attaches the hooks
that apply the current masks (`attach`), names the activations whose means mean ablation needs (`mean_sites`), and
records the facts about the model an artifact must match (`describe`). It never owns mask state: logits, fixed and
forced masks and means live in `PrunableModel`, which every hook asks through the `MaskSource` protocol.

It also says, without a model, what its masks *own*: which mask kinds are its own (`mask_kinds`), their shapes
(`kind_shapes`), what "everything kept" is (`everything_kept`), and how its masks read in the architecture's units
(`owned_units`: query heads, MLP blocks, intermediate neurons, `OwnedUnits`). Slim export and Subtask Induction slice
and gate by those units (which rows and columns each owns: `architectures.ownership`), so a new granularity whose
masks map to them exports and transplants with no edit outside its own folder.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Protocol

import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ..ablation.means import ActivationSite
from .settings import GranularitySettings

__all__ = ["ActivationSite", "Granularity", "MaskKind", "MaskSource", "OwnedUnits", "UnitSizes"]


@dataclass(frozen=True)
class UnitSizes:
    """The unit counts of a single-stack architecture that mask shapes are made of."""

    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate: int


@dataclass(frozen=True)
class OwnedUnits:
    """Masks (and mean activations) in the architecture's units: query heads `[L, H]`, MLP blocks `[L]`,
    intermediate neurons `[L, intermediate]` (1 keeps). None: the masks say nothing about that unit (export keeps
    all of them, a transplant copies none). Means: `[L, H, head_dim]`, `[L, hidden]`, `[L, intermediate]`."""

    heads: torch.Tensor | None = None
    mlps: torch.Tensor | None = None
    neurons: torch.Tensor | None = None
    head_means: torch.Tensor | None = None
    mlp_means: torch.Tensor | None = None
    neuron_means: torch.Tensor | None = None

    @classmethod
    def from_masks(cls, masks: Mapping[str, torch.Tensor]) -> OwnedUnits:
        """From masks keyed by the unit names (`heads`, `mlps`, `neurons`); other keys are ignored."""
        return cls(**{unit: masks[unit] for unit in ("heads", "mlps", "neurons") if unit in masks})

    def filled(self, sizes: UnitSizes) -> OwnedUnits:
        """Every unit the masks say nothing about kept (neurons stay None: whole MLP blocks decide)."""
        return replace(self, heads=torch.ones(sizes.num_layers, sizes.num_heads) if self.heads is None else self.heads,
                       mlps=torch.ones(sizes.num_layers) if self.mlps is None else self.mlps)

    def layer_means(self, layer: int) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
        """(head means, MLP mean, neuron means) of one layer, None where there are none."""
        return tuple(None if means is None else means[layer]
                     for means in (self.head_means, self.mlp_means, self.neuron_means))


@dataclass(frozen=True)
class MaskKind:
    """One kind of mask: its shape, what its entries are, and what one entry stands for.

    `params_per_entry` weights the parameter-weighted sparsity. Entries along `layer_dim` belong to one layer (for
    per-layer top-k and per-layer statistics); `stack` keeps layers of different stacks (encoder, decoder) apart.
    `means_shape` is the shape of the mean activations mean ablation needs (None: this kind has no mean ablation).
    `dims` names the dimensions for error messages (`("num_layers", "num_heads")`). `unit_group` is how many
    consecutive entries of a layer share parameters and go together in a uniform layout (the query heads of one
    key/value head under grouped-query attention; 1 otherwise). `title` names the entries for people
    ("encoder MLP blocks").
    """

    name: str
    shape: tuple[int, ...]
    role: str
    params_per_entry: float = 1.0
    stack: str = ""
    layer_dim: int | None = 0
    means_shape: tuple[int, ...] | None = None
    label_prefix: str = ""
    dims: tuple[str, ...] = ()
    unit_group: int = 1
    # What one entry is, for people (a model card's "MLP blocks kept"); empty: the kind's name.
    title: str = ""

    @property
    def numel(self) -> int:
        count = 1
        for size in self.shape:
            count *= size
        return count

    def layer_index(self) -> torch.Tensor:
        """The layer of every entry (same shape as the mask); all 0 when the kind has no layer dimension."""
        if self.layer_dim is None:
            return torch.zeros(self.shape, dtype=torch.long)
        view = [1] * len(self.shape)
        view[self.layer_dim] = self.shape[self.layer_dim]
        return torch.arange(self.shape[self.layer_dim]).view(view).expand(self.shape)

    def label(self, index: tuple[int, ...]) -> str:
        """"L4.H0" for a head, "L3.MLP" for an MLP block (with the kind's prefix, e.g. "dec."), else kind[i, j]."""
        if self.role == "heads" and len(index) == 2:
            return f"{self.label_prefix}L{index[0]}.H{index[1]}"
        if self.role == "mlps" and len(index) == 1:
            return f"{self.label_prefix}L{index[0]}.MLP"
        return f"{self.name}[{', '.join(str(i) for i in index)}]"


class MaskSource(Protocol):
    """What hooks ask the wrapper at every forward pass (implemented by `PrunableModel`)."""

    def active_mask(self, kind: str) -> torch.Tensor | None:
        """This forward pass's mask of `kind`, or None to leave the activation alone (masks off, kind not pruned)."""

    def ablation_reference(self, kind: str, layer: int, x: torch.Tensor) -> torch.Tensor | None:
        """What replaces a masked value of `kind` in `layer`: a mean, another example's activation, or None (zero)."""


class Granularity(ABC):
    """Base class of the mask granularities (see the module docstring)."""

    name: ClassVar[str] = ""
    # The torch-free dataclass of the PruningConfig fields only this granularity reads (`granularity/settings.py`).
    settings_class: ClassVar[type[GranularitySettings]] = GranularitySettings
    # Ablation modes this granularity can apply; mean and resample need activations to stand in for masked ones.
    ablations: ClassVar[tuple[str, ...]] = ("zero",)
    # Relaxations it supports (None: every registered one).
    relaxations: ClassVar[tuple[str, ...] | None] = None
    # The mask kinds of a single-stack model, as `get_masks()` keys them (empty: masks keyed otherwise).
    mask_kinds: ClassVar[tuple[str, ...]] = ()
    # Masks keyed by parameter names (`named_parameters()`) instead of kinds (the weight granularity).
    keyed_by_parameter: ClassVar[bool] = False
    # Kind -> the `PruningConfig` flag that turns it off (an unpruned kind's masks are all ones by construction).
    pruned_flags: ClassVar[dict[str, str]] = {}
    # Kinds whose random controls keep the same count per layer row (Subtask Induction's "random" arm).
    per_layer_kinds: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def kind_shapes(cls, sizes: UnitSizes) -> dict[str, tuple[int, ...]]:
        """The shape of each of `mask_kinds` for an architecture of `sizes` (empty: none that sizes determine)."""
        return {}

    @classmethod
    def everything_kept(cls, sizes: UnitSizes) -> dict[str, torch.Tensor]:
        """All-ones masks of every kind: the full model."""
        return {kind: torch.ones(shape) for kind, shape in cls.kind_shapes(sizes).items()}

    @classmethod
    def owned_units(cls, masks: Mapping[str, torch.Tensor], sizes: UnitSizes,
                    means: Mapping[str, torch.Tensor] | None = None) -> OwnedUnits | None:
        """`masks` (and `means`) by kind in the architecture's units; None when this granularity's masks do not
        map to heads, MLP blocks or neurons (then they can be neither sliced nor transplanted as units)."""
        return None

    @classmethod
    def shape_text(cls, config: Any) -> str | None:
        """The mask shapes in words for a model card ("6 layers x 12 heads"); None: list the kinds' shapes."""
        return None

    @classmethod
    def record_mask(cls, kind: str, mask: torch.Tensor) -> list:
        """A mask as a JSON list for records (slim export's config)."""
        return mask.tolist()

    def __init__(self, model: nn.Module, config: Any) -> None:
        self.model = model
        self.config = config

    # The resolved architecture, for granularities that hook per-layer modules of a Transformers model.
    architecture: Any = None

    @abstractmethod
    def kinds(self) -> dict[str, MaskKind]:
        """Every mask kind of the wrapped model, in a fixed order."""

    def enabled(self, kind: MaskKind) -> bool:
        """Whether masks of `kind` are learned (a kind that is not is always kept)."""
        return True

    @abstractmethod
    def attach(self, source: MaskSource) -> list[RemovableHandle]:
        """Register the hooks that apply `source`'s masks; they are removed by `PrunableModel.unwrap()`."""

    def mean_sites(self, keep_dropout: bool = False) -> dict[str, list[ActivationSite]]:
        """Per kind, one site per layer whose mean activation mean ablation needs (default: none). With
        `keep_dropout`, sites whose value passes a dropout of their own before it matters may move after it."""
        return {}

    def describe(self) -> dict[str, Any]:
        """Facts about the wrapped model recorded in `PruningConfig` (an artifact must match them to load)."""
        return {}
