"""The `edge` granularity: one mask per edge of the residual-stream graph (Edge Pruning, Bhaskar et al. 2024), on
pre-LayerNorm decoders, through hooks: `settings` (torch-free), `graph` (the edges and their order), `sites` (where
each architecture family's readers and writers are) and `granularity` (the hooks).

The torch-side modules are imported on first attribute access, so importing the settings never imports torch.
"""

from __future__ import annotations

from ..._lazy import lazy_exports
from . import settings
from .settings import *
from .settings import EdgeSettings

_LAZY_NAMES = {"EdgeGranularity": "granularity", "EdgeGraph": "graph", "edge_sites": "sites"}
__all__ = [*_LAZY_NAMES, *settings.__all__]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY_NAMES)
