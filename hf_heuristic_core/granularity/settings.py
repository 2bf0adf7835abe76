"""What every granularity's settings provide: a small torch-free dataclass of the `PruningConfig` fields only that
granularity reads (the PEFT pattern: one config per method), as the relaxations' settings do.

`PruningConfig` composes the built-in granularities' settings (their fields are its flat fields, so old keyword
arguments and saved `pruning_config.json` files keep working); `PruningConfig.granularity_settings` is the chosen
granularity's settings object. Nothing here imports torch: building a config, and `--help`, stay fast.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..method_settings import MethodSettings

__all__ = ["GranularitySettings"]


@dataclass(kw_only=True)
class GranularitySettings(MethodSettings):
    """Base of a granularity's settings; a granularity without settings of its own uses it as is. Command-line
    flags generated from its fields default to the field's default (`MethodSettings.cli_unset_by_default`)."""
