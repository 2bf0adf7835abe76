"""The base of every method's settings (relaxations, granularities): a small torch-free dataclass whose fields are
`PruningConfig`'s flat fields of that method (the PEFT pattern: one config per method)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = ["MethodSettings"]


@dataclass(kw_only=True)
class MethodSettings:
    """Read off a config, checked and written back as a dict; subclasses add the fields and `validate`."""

    # Whether command-line flags generated from these fields (`cli.settings_flags`) default to None (unset: the
    # config's or the recipe's value is used) rather than to the field's default.
    cli_unset_by_default: ClassVar[bool] = False

    def validate(self) -> None:
        """Reject values that would silently give meaningless masks (messages name `PruningConfig`'s field)."""

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def from_config(cls, config: Any) -> MethodSettings:
        """These settings read off a `PruningConfig` (or any object with the same attribute names)."""
        return cls(**{name: getattr(config, name) for name in cls.field_names() if hasattr(config, name)})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
