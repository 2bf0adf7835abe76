"""What every granularity's settings provide: a small torch-free dataclass of the `PruningConfig` fields only that
granularity reads (the PEFT pattern: one config per method), as the relaxations' settings do.

`PruningConfig.granularity_settings` is the chosen granularity's settings object, saved under the granularity's name;
the rules that depend on the granularity (its default ablation, whether it has a per-layer unit count) are asked of
this class, so nothing outside the granularity's folder names it. Nothing here imports torch: building a config, and
`--help`, stay fast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..method_settings import MethodSettings

__all__ = ["GranularitySettings"]


@dataclass(kw_only=True)
class GranularitySettings(MethodSettings):
    """Base of a granularity's settings; a granularity without settings of its own uses it as is. Command-line
    flags generated from its fields default to the field's default (`MethodSettings.cli_unset_by_default`)."""

    # What replaces a masked value when PruningConfig(ablation=None): the Heuristic Core's mean ablation.
    default_ablation: ClassVar[str] = "mean"
    # Whether masks of this granularity have a unit count per layer, so that PruningConfig(uniform_layers=True)
    # can keep the same count in every layer.
    supports_uniform_layers: ClassVar[bool] = True
    # Why a slim export cannot drop what this granularity's masks cut (None: whole heads / MLP blocks / neurons, which
    # it can); shown when `export` refuses such masks.
    slim_refusal: ClassVar[str | None] = "its mask entries are not whole heads, MLP blocks or MLP neurons"

    @property
    def logits_storage_dtype(self) -> str:
        """The dtype the mask logits are stored in while training ("float32" unless the settings say otherwise)."""
        return "float32"
