"""What every granularity's settings provide: a small torch-free dataclass of the `PruningConfig` fields only that
granularity reads (the PEFT pattern: one config per method), as the relaxations' settings do.

`PruningConfig` composes the built-in granularities' settings (their fields are its flat fields, so old keyword
arguments and saved `pruning_config.json` files keep working); `PruningConfig.granularity_settings` is the chosen
granularity's settings object. Nothing here imports torch: building a config, and `--help`, stay fast.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = ["GranularitySettings"]


@dataclass(kw_only=True)
class GranularitySettings:
    """Base of a granularity's settings; a granularity without settings of its own uses it as is."""

    # Command-line flags generated from these fields (`cli.settings_flags`) default to the field's default.
    cli_unset_by_default: ClassVar[bool] = False

    def validate(self) -> None:
        """Reject values that would silently give meaningless masks (messages name `PruningConfig`'s field)."""

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_config(cls, config: Any) -> "GranularitySettings":
        """These settings read off a `PruningConfig` (or any object with the same attribute names)."""
        return cls(**{name: getattr(config, name) for name in cls.field_names() if hasattr(config, name)})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
