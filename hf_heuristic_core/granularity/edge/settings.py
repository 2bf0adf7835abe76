"""Edge-granularity settings (torch-free): none of its own yet; the class is the place for them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..settings import GranularitySettings

__all__ = ["EDGE_KIND", "EdgeSettings"]

# The one mask kind of the edge granularity: a vector over the edges (`graph.EdgeGraph` orders them).
EDGE_KIND = "edges"


@dataclass(kw_only=True)
class EdgeSettings(GranularitySettings):
    """One mask per edge of the residual-stream graph (Edge Pruning); it has no settings of its own."""

    supports_uniform_layers: ClassVar[bool] = False   # one mask vector over the graph: no per-layer unit count
    slim_refusal: ClassVar[str | None] = ("edges between heads and MLP blocks: a head cut from one reader still "
                                          "writes to the others")
