"""hf_heuristic_core: structured pruning of attention heads and MLP blocks for Hugging Face Transformers.

Masks are injected through hooks (no forked modeling files); see `PrunableModel`, `PruningConfig` and
`PruningTrainer`. Plotting lives in `hf_heuristic_core.plotting` (needs the `plot` extra).
"""

from .analysis import AblationTable, PruneManyResult, ablation_table, datasets_from_spec, prune_many
from .architectures import ARCHITECTURES, ArchitectureMap, resolve_architecture, supported_model_types
from .arguments import PruningArguments
from .artifacts import MaskArtifact, read_artifact
from .attention_patterns import AttentionUnavailableError, attention_shares, collect_attention_shares
from .callbacks import EffectiveSizeCallback
from .config import PruningConfig
from .data import collapse_nli_predictions, generate_nli, hans_subsets, load_hans, load_mnli, load_paws, load_qqp
from .evaluation import evaluate_subnetwork, full_model_accuracy
from .effective_size import EffectiveSizeError, effective_size, effective_size_per_seed
from .errors import (ArtifactError, MaskShapeError, MissingMeansError, PruningError,
                     UnsupportedArchitectureError)
from .hard_concrete import HardConcrete, topk_binarize
from .mask_stats import (CoreResult, MaskStatsError, core, head_frequency, inverse, iomin, iou, joint_frequency,
                         mlp_frequency, random_from_complement, random_like, spearman, unit_frequency)
from .model import PrunableModel
from .report import analyze
from .search import ClimbSchedule, EffectiveSizeSearch, search_effective_size
from .tracking import EffectiveSizeResults, track_effective_size
from .trainer import PruningTrainer, TeacherCache, kl_to_teacher

__version__ = "0.1.0"

__all__ = [
    "ClimbSchedule", "EffectiveSizeCallback", "EffectiveSizeResults", "EffectiveSizeSearch", "search_effective_size",
    "track_effective_size",
    "AblationTable", "AttentionUnavailableError", "PruneManyResult", "ablation_table", "analyze",
    "attention_shares", "collect_attention_shares", "datasets_from_spec", "evaluate_subnetwork",
    "full_model_accuracy", "prune_many",
    "ARCHITECTURES", "ArchitectureMap", "ArtifactError", "CoreResult", "EffectiveSizeError", "HardConcrete",
    "MaskArtifact", "MaskShapeError", "MaskStatsError", "MissingMeansError", "PrunableModel", "PruningArguments",
    "PruningConfig", "PruningError", "PruningTrainer", "TeacherCache", "UnsupportedArchitectureError",
    "collapse_nli_predictions", "core", "effective_size", "effective_size_per_seed", "generate_nli",
    "hans_subsets", "head_frequency", "inverse", "iomin", "iou", "joint_frequency", "kl_to_teacher", "load_hans",
    "load_mnli", "load_paws", "load_qqp", "mlp_frequency", "random_from_complement", "random_like",
    "read_artifact", "resolve_architecture", "spearman", "supported_model_types", "topk_binarize",
    "unit_frequency",
]
