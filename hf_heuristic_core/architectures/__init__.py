"""Where a mask hooks: per-architecture module paths, detection of unknown models, widths and parameter counts."""

from .resolve import (ARCHITECTURES, ArchitectureMap, ResolvedArchitecture, resolve_architecture,
                      supported_model_types, transformers_model)

__all__ = ["ARCHITECTURES", "ArchitectureMap", "ResolvedArchitecture", "resolve_architecture",
           "supported_model_types", "transformers_model"]
