"""Unit-granularity settings (torch-free): which of *The Heuristic Core*'s unit kinds get masks."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..settings import GranularitySettings

__all__ = ["UnitSettings"]


@dataclass(kw_only=True)
class UnitSettings(GranularitySettings):
    """Mask attention heads, whole MLP blocks, or both (at least one: `PruningConfig` refuses neither)."""

    prune_heads: bool = field(default=True, metadata={"help": "Mask attention heads."})
    prune_mlps: bool = field(default=True, metadata={"help": "Mask whole MLP blocks."})
