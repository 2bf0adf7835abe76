"""Unit-granularity settings (torch-free): which of *The Heuristic Core*'s unit kinds get masks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..settings import GranularitySettings

__all__ = ["UnitSettings"]


@dataclass(kw_only=True)
class UnitSettings(GranularitySettings):
    """Mask attention heads, whole MLP blocks, or both (at least one: `PruningConfig` refuses neither)."""

    slim_refusal: ClassVar[str | None] = None   # whole heads and MLP blocks: a slim export drops them

    prune_heads: bool = field(default=True, metadata={"help": "Mask attention heads."})
    prune_mlps: bool = field(default=True, metadata={"help": "Mask whole MLP blocks."})

    def validate(self) -> None:
        if not (self.prune_heads or self.prune_mlps):
            raise ValueError("PruningConfig: prune_heads and prune_mlps both False leave nothing to prune; enable at "
                             "least one of them.")
