"""`PruningConfig`: what is masked (granularity), how mask values are drawn (relaxation), what replaces a masked
value (ablation), and the relaxation's constants.

The defaults reproduce the recipe of *The Heuristic Core* (appendix B, checked against its released code):
one mask per attention head and per whole MLP block (`granularity="unit"`), mean ablation, hard-concrete masks
(`relaxation="hard_concrete"`) with l = -0.1, r = 1.1, beta = 2/3, eps = 1e-6 and `log_alpha` initialized from
N(10, 0.01). Validation needs only the registries' names, so building a config imports no torch.

The weight-mask papers' settings: `granularity="weight"` (one mask per entry of the Linear / Conv1D weights selected by
`target_modules`, `layers_to_transform`, `mask_bias`; zero ablation of weights) or `"neuron"` (MLP intermediate
neurons); `relaxation="continuous_sparsification"` (Lepori: s init 0, beta 1 -> 200 by an epoch-end schedule, eval
1[s > 0]) or `"gumbel_sigmoid"` (Csordás: keep probability 0.9 at init, tau 1, 4 mask samples per batch, eval
1[l > 0]). `ablation=None` and `binarization=None` resolve to each choice's paper default. Weight masks keep one logit
per weight: `logits_dtype="bfloat16"` stores them (and so their gradients and Adam's moments) in bf16, 8 bytes per
masked weight instead of 16, fine for continuous sparsification's near-zero logits but lossy for Gumbel-sigmoid's
(BENCHMARKS.md, weight masks).

`uniform_layers=True` binarizes to the same count in every layer (heads in whole key/value groups, MLP blocks all
kept or all removed, the same number of MLP neurons): the Minitron / Sheared-LLaMA constraint, which a stock
Transformers config can express, so the slim export loads with plain `from_pretrained` (`relaxations.uniform`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from .ablation.names import ABLATION_MODES
from .granularity import GRANULARITIES, granularity_settings_class
from .granularity.neuron.settings import NeuronSettings
from .granularity.settings import GranularitySettings
from .granularity.unit.settings import UnitSettings
from .granularity.weight.settings import LOGITS_DTYPES, WeightSettings
from .io_utils import atomic_write_text
from .relaxations import RELAXATIONS, relaxation_settings_class
from .relaxations.continuous_sparsification.settings import ContinuousSparsificationSettings
from .relaxations.gumbel_sigmoid.settings import GumbelSigmoidSettings
from .relaxations.hard_concrete.settings import HardConcreteSettings
from .relaxations.settings import RelaxationSettings

# The built-in relaxations' settings, composed into PruningConfig (their fields are its flat fields).
RELAXATION_SETTINGS_CLASSES: tuple[type[RelaxationSettings], ...] = (
    HardConcreteSettings, ContinuousSparsificationSettings, GumbelSigmoidSettings)
# The built-in granularities' settings, composed the same way (the PruningConfig fields only that granularity reads).
GRANULARITY_SETTINGS_CLASSES: tuple[type[GranularitySettings], ...] = (UnitSettings, NeuronSettings, WeightSettings)
# Every method's settings class PruningConfig composes (the prune command's flags are generated from them).
SETTINGS_CLASSES: tuple[type, ...] = (*GRANULARITY_SETTINGS_CLASSES, *RELAXATION_SETTINGS_CLASSES)

CONFIG_NAME = "pruning_config.json"

BINARIZATION_RULES = ("topk", "threshold")
BINARIZATION_SCOPES = ("global", "per_layer")
EVAL_MASKS = ("binary", "soft")


@dataclass
class PruningConfig(WeightSettings, NeuronSettings, UnitSettings,
                    GumbelSigmoidSettings, ContinuousSparsificationSettings, HardConcreteSettings):
    """Settings of a pruning run; serialized next to the masks so an artifact explains itself.

    Each relaxation's constants come from its settings dataclass (`relaxations/<name>/settings.py`), and each
    granularity's own fields from its (`granularity/<name>/settings.py`: unit `prune_heads`, `prune_mlps`; weight
    `target_modules`, `layers_to_transform`, `mask_bias`, `logits_dtype`), composed here as keyword-only fields, so
    `PruningConfig(temperature=0.5, mask_bias=True)` and old `pruning_config.json` files work unchanged;
    `relaxation_settings` and `granularity_settings` are the chosen ones' settings objects.

    Architecture overrides (`layers_path`, `attention_output`, `mlp_output`, `num_heads`) are only needed for
    models the built-in map and the suffix detection do not cover; paths are relative to `model.base_model`
    (`layers_path`) and to one layer (`attention_output`, `mlp_output`).
    """

    # The relaxation-dependent defaults are the chosen relaxation's (`relaxation_settings`), not the config's own.
    paper_binarization: ClassVar[str | None] = None
    default_mask_samples: ClassVar[int | None] = None
    default_penalty_weight: ClassVar[float | None] = None

    granularity: str = "unit"
    relaxation: str = "hard_concrete"
    # The granularities' fields are those of their settings dataclasses (the bases above), keyword-only.
    # None: "mean" (the paper's), or "zero" for granularity="weight" (weight masking is zero ablation of weights).
    ablation: str | None = None

    # The relaxations' constants are the fields of their settings dataclasses (the bases above; hard concrete:
    # init_mean, init_std, temperature, limit_left, limit_right, eps; continuous sparsification: cs_init, cs_beta,
    # cs_beta_max; Gumbel-sigmoid: gumbel_init_prob, gumbel_tau), keyword-only. Mask samples per batch (one per
    # chunk); None: the relaxation's paper default (Gumbel-sigmoid: 4).
    mask_samples: int | None = None

    # How learned masks become 0/1 masks (binarization None: the relaxation's paper rule, topk for hard concrete).
    binarization: str | None = None
    binarization_scope: str = "global"
    # Keep the same number of heads (whole key/value groups under GQA) and the same MLP width in every layer when
    # masks are binarized, so that a slim export is a stock config (`docs/guides/slim_reload.md`).
    uniform_layers: bool = False
    threshold: float = 0.5
    eval_mask: str = "binary"

    freeze_base_model: bool = True

    # Architecture overrides.
    layers_path: str | None = None
    attention_output: str | None = None
    mlp_output: str | None = None
    num_heads: int | None = None
    # Prune a model whose layer lists are only partly covered by the map (e.g. a vision tower left out), on purpose.
    allow_partial_model: bool = False

    # Filled in by PrunableModel: what the masks were made for.
    model_type: str | None = None
    base_model_name_or_path: str | None = None
    base_model_revision: str | None = None
    base_model_class: str | None = None
    # The GGUF file inside base_model_name_or_path the model was read from (None: a Transformers checkpoint).
    base_model_gguf_file: str | None = None
    num_layers: int | None = None
    head_dim: int | None = None
    hidden_size: int | None = None
    mask_shapes: dict[str, list[int]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.ablation is None:
            self.ablation = "zero" if self.granularity == "weight" else "mean"
        _check_choice("relaxation", self.relaxation, tuple(RELAXATIONS.names()))
        settings_class = relaxation_settings_class(self.relaxation)
        if self.binarization is None:
            self.binarization = settings_class.paper_binarization
        if self.mask_samples is None:
            self.mask_samples = settings_class.default_mask_samples
        if isinstance(self.layers_to_transform, int):
            self.layers_to_transform = [self.layers_to_transform]
        self.validate()

    def validate(self) -> None:
        """Reject settings that would silently produce meaningless masks."""
        _check_choice("granularity", self.granularity, tuple(GRANULARITIES.names()))
        _check_choice("relaxation", self.relaxation, tuple(RELAXATIONS.names()))
        _check_choice("ablation", self.ablation, ABLATION_MODES)
        _check_choice("binarization", self.binarization, BINARIZATION_RULES)
        _check_choice("binarization_scope", self.binarization_scope, BINARIZATION_SCOPES)
        _check_choice("eval_mask", self.eval_mask, EVAL_MASKS)
        _check_choice("logits_dtype", self.logits_dtype, LOGITS_DTYPES)
        if self.logits_dtype != "float32" and self.granularity != "weight":
            raise ValueError(f"PruningConfig: logits_dtype={self.logits_dtype!r} is for weight masks (one logit per "
                             f"weight); {self.granularity!r} masks have few logits, keep logits_dtype='float32'.")
        if self.granularity == "unit" and not (self.prune_heads or self.prune_mlps):
            raise ValueError("PruningConfig: prune_heads and prune_mlps are both False, so nothing can be pruned; "
                             "enable at least one of them.")
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"PruningConfig: threshold must be in (0, 1), got {self.threshold}.")
        for settings_class in RELAXATION_SETTINGS_CLASSES:
            settings_class.from_config(self).validate()
        self.relaxation_settings.validate()
        for settings_class in GRANULARITY_SETTINGS_CLASSES:
            settings_class.from_config(self).validate()
        self.granularity_settings.validate()
        if not (isinstance(self.mask_samples, int) and self.mask_samples >= 1):
            raise ValueError(f"PruningConfig: mask_samples must be an integer >= 1, got {self.mask_samples!r}.")
        if self.granularity != "weight" and (self.target_modules is not None or self.layers_to_transform is not None
                                             or self.mask_bias):
            raise ValueError(f"PruningConfig: target_modules, layers_to_transform and mask_bias select weights, so "
                             f"they need granularity='weight' (got granularity={self.granularity!r}).")
        if self.uniform_layers and self.granularity == "weight":
            raise ValueError("PruningConfig: uniform_layers keeps the same number of heads / MLP neurons in every "
                             "layer, so it needs granularity='unit' or 'neuron' (weight masks have no per-layer "
                             "unit count); drop uniform_layers or change the granularity.")
        if self.num_heads is not None and self.num_heads <= 0:
            raise ValueError(f"PruningConfig: num_heads must be positive, got {self.num_heads}.")

    @property
    def relaxation_settings(self) -> RelaxationSettings:
        """The chosen relaxation's settings (a copy: change the config, not this object)."""
        return relaxation_settings_class(self.relaxation).from_config(self)

    @property
    def granularity_settings(self) -> GranularitySettings:
        """The chosen granularity's settings (a copy: change the config, not this object)."""
        return granularity_settings_class(self.granularity).from_config(self)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def settings_only(self) -> "PruningConfig":
        """A copy without the facts `PrunableModel` records about the model it wrapped (so it can wrap another)."""
        facts = {"num_layers": None, "head_dim": None, "hidden_size": None, "mask_shapes": None}
        return PruningConfig.from_dict({**self.to_dict(), **facts})

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "PruningConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"PruningConfig.from_dict: unknown field(s) {unknown}; known fields are {sorted(known)}.")
        return cls(**data)

    def save_pretrained(self, save_directory: str | os.PathLike) -> Path:
        """Write `pruning_config.json` atomically (temp file, then rename)."""
        directory = Path(save_directory)
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / CONFIG_NAME
        atomic_write_text(target, json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")
        return target

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike) -> "PruningConfig":
        path = Path(directory)
        if path.is_dir():
            path = path / CONFIG_NAME
        if not path.is_file():
            raise FileNotFoundError(f"No {CONFIG_NAME} at {path}; save one with PruningConfig.save_pretrained(dir).")
        try:
            data = json.loads(path.read_text())
        except json.JSONDecodeError as err:
            raise ValueError(f"{path} is not valid JSON ({err}); the file is corrupt or partial, re-save it.") from err
        return cls.from_dict(data)


def _check_choice(name: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"PruningConfig: {name}={value!r} is not one of {list(choices)}.")
