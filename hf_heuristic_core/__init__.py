"""hf_heuristic_core: structured pruning of attention heads and MLP blocks for Hugging Face Transformers.

Masks are injected through hooks (no forked modeling files); see `PrunableModel`, `PruningConfig` and
`PruningTrainer`. Plotting lives in `hf_heuristic_core.plotting` (needs the `plot` extra).

Names are imported on first use, so `import hf_heuristic_core` (and every `hf-heuristic-core ... --help`) does not
pay for torch, transformers and datasets until they are needed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import _compat
from ._lazy import lazy_exports

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS: dict[str, str] = {
    **dict.fromkeys(["AblationTable", "ablation_table"], "analysis.ablation_table"),
    "PruneManyResult": "analysis.results",
    "TokenAlignmentError": "ablation.alignment",
    "datasets_from_spec": "data.spec",
    "load_table": "data.tables",
    "tokenize_dataset": "data.tokenize",
    "prune_many": "analysis.prune_many",
    **dict.fromkeys(["ARCHITECTURES", "ArchitectureMap", "supported_model_types"], "architectures.registry"),
    "resolve_architecture": "architectures.resolve",
    "PruningArguments": "training.arguments",
    **dict.fromkeys(["MaskArtifact", "read_artifact"], "artifacts"),
    **dict.fromkeys(["AttentionUnavailableError", "attention_shares", "collect_attention_shares"],
                    "analysis.attention_patterns"),
    "EffectiveSizeCallback": "search.callback",
    "PruningConfig": "config",
    # Each method's settings object (`PruningConfig(relaxation=HardConcreteSettings(init_mean=3.0))`), torch-free.
    "HardConcreteSettings": "relaxations.hard_concrete.settings",
    "ContinuousSparsificationSettings": "relaxations.continuous_sparsification.settings",
    "GumbelSigmoidSettings": "relaxations.gumbel_sigmoid.settings",
    "UnitSettings": "granularity.unit.settings",
    "NeuronSettings": "granularity.neuron.settings",
    "WeightSettings": "granularity.weight.settings",
    "EdgeSettings": "granularity.edge.settings",
    **dict.fromkeys(["collapse_nli_predictions", "generate_nli", "hans_subsets", "load_hans", "load_mnli",
                     "load_paws", "load_qqp"], "data.nli"),
    **dict.fromkeys(["evaluate_subnetwork", "full_model_accuracy"], "evaluation.subnetwork"),
    **dict.fromkeys(["EffectiveSizeError", "effective_size", "effective_size_per_seed"], "evaluation.effective_size"),
    **dict.fromkeys(["export_slim", "load_slim", "push_slim_to_hub", "save_slim"], "export"),
    **dict.fromkeys(["SlimMap", "slim_model_types"], "architectures.registry"),
    **dict.fromkeys(["ArtifactError", "ExportError", "MaskPassError", "MaskShapeError", "MissingMeansError",
                     "PruningError", "UnsupportedArchitectureError"], "errors"),
    "HardConcrete": "relaxations.hard_concrete",
    "topk_binarize": "relaxations.binarize",
    **dict.fromkeys(["CoreResult", "MaskStatsError", "core", "head_frequency", "inverse", "iomin", "iou",
                     "joint_frequency", "mlp_frequency", "random_from_complement", "random_like", "spearman",
                     "unit_frequency"], "analysis.mask_stats"),
    "PrunableModel": "model",
    "analyze": "analysis.report",
    **dict.fromkeys(["ClimbSchedule", "EffectiveSizeSearch", "search_effective_size"], "search.run"),
    "SearchSettings": "search.settings",
    **dict.fromkeys(["EffectiveSizeResults", "track_effective_size"], "search.tracking"),
    "PruningTrainer": "training.trainer",
    "TeacherCache": "training.teacher",
    "kl_to_teacher": "losses",
    **dict.fromkeys(["LeporiResult", "invert_masks", "mask_overlap", "performance_drop_table", "sharing_fractions",
                     "specialization_scores", "subtask_test"], "analysis.subtasks"),
    **dict.fromkeys(["ContinuousSparsification"], "relaxations.continuous_sparsification"),
    **dict.fromkeys(["GumbelSigmoid"], "relaxations.gumbel_sigmoid"),
    **dict.fromkeys(["build_arm", "frozen_gates", "inverse_masks", "load_transplanted", "merge_transplant",
                     "random_like_counts", "transfer_subnetwork"], "induction"),
    "InductionArguments": "induction.arguments",
    "run_induction": "induction.runner",
}

__all__ = sorted(_EXPORTS)

_compat.install(__name__)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only
    from .ablation.alignment import TokenAlignmentError
    from .analysis.attention_patterns import AttentionUnavailableError, attention_shares, collect_attention_shares
    from .analysis.mask_stats import (CoreResult, MaskStatsError, core, head_frequency, inverse, iomin, iou,
                                      joint_frequency, mlp_frequency, random_from_complement, random_like, spearman,
                                      unit_frequency)
    from .analysis.ablation_table import AblationTable, ablation_table
    from .analysis.prune_many import prune_many
    from .analysis.results import PruneManyResult
    from .data.spec import datasets_from_spec
    from .data.tables import load_table
    from .data.tokenize import tokenize_dataset
    from .analysis.report import analyze
    from .analysis.subtasks import (LeporiResult, invert_masks, mask_overlap, performance_drop_table,
                                    sharing_fractions, specialization_scores, subtask_test)
    from .relaxations.continuous_sparsification import ContinuousSparsification
    from .relaxations.gumbel_sigmoid import GumbelSigmoid
    from .induction import (build_arm, frozen_gates, inverse_masks, load_transplanted, merge_transplant,
                            random_like_counts, transfer_subnetwork)
    from .induction.arguments import InductionArguments
    from .induction.runner import run_induction
    from .architectures.registry import ARCHITECTURES, ArchitectureMap, supported_model_types
    from .architectures.resolve import resolve_architecture
    from .artifacts import MaskArtifact, read_artifact
    from .config import PruningConfig
    from .granularity.edge.settings import EdgeSettings
    from .granularity.neuron.settings import NeuronSettings
    from .granularity.unit.settings import UnitSettings
    from .granularity.weight.settings import WeightSettings
    from .relaxations.continuous_sparsification.settings import ContinuousSparsificationSettings
    from .relaxations.gumbel_sigmoid.settings import GumbelSigmoidSettings
    from .relaxations.hard_concrete.settings import HardConcreteSettings
    from .data.nli import (collapse_nli_predictions, generate_nli, hans_subsets, load_hans, load_mnli, load_paws,
                           load_qqp)
    from .export import export_slim, load_slim, push_slim_to_hub, save_slim
    from .architectures.registry import SlimMap, slim_model_types
    from .errors import (ArtifactError, ExportError, MaskPassError, MaskShapeError, MissingMeansError,
                         PruningError, UnsupportedArchitectureError)
    from .evaluation.effective_size import EffectiveSizeError, effective_size, effective_size_per_seed
    from .evaluation.subnetwork import evaluate_subnetwork, full_model_accuracy
    from .model import PrunableModel
    from .relaxations.binarize import topk_binarize
    from .relaxations.hard_concrete import HardConcrete
    from .search.callback import EffectiveSizeCallback
    from .search.run import ClimbSchedule, EffectiveSizeSearch, search_effective_size
    from .search.settings import SearchSettings
    from .search.tracking import EffectiveSizeResults, track_effective_size
    from .losses import kl_to_teacher
    from .training.teacher import TeacherCache
    from .training.trainer import PruningTrainer
