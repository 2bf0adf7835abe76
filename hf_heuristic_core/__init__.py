"""hf_heuristic_core: structured pruning of attention heads and MLP blocks for Hugging Face Transformers.

Masks are injected through hooks (no forked modeling files); see `PrunableModel` and `PruningConfig`.
"""

from .architectures import ARCHITECTURES, ArchitectureMap, resolve_architecture, supported_model_types
from .artifacts import MaskArtifact, read_artifact
from .config import PruningConfig
from .errors import (ArtifactError, MaskShapeError, MissingMeansError, PruningError,
                     UnsupportedArchitectureError)
from .hard_concrete import HardConcrete, topk_binarize
from .model import PrunableModel

__version__ = "0.1.0"

__all__ = [
    "ARCHITECTURES", "ArchitectureMap", "ArtifactError", "HardConcrete", "MaskArtifact", "MaskShapeError",
    "MissingMeansError", "PrunableModel", "PruningConfig", "PruningError", "UnsupportedArchitectureError",
    "read_artifact", "resolve_architecture", "supported_model_types", "topk_binarize",
]
