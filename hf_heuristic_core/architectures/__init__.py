"""Where a mask hooks: per-architecture module paths (`registry`), and resolving them on a loaded model
(`resolve`: layers, hook sites, widths, parameter counts, detection of unknown models)."""

from .registry import ARCHITECTURES, ArchitectureMap, supported_model_types
from .resolve import ResolvedArchitecture, ResolvedStack, resolve_architecture, transformers_model

__all__ = ["ARCHITECTURES", "ArchitectureMap", "ResolvedArchitecture", "ResolvedStack", "resolve_architecture",
           "supported_model_types", "transformers_model"]
