"""The base of every method's settings (relaxations, granularities): a small torch-free dataclass that
`PruningConfig` holds as its own object (`config.relaxation_settings`, `config.granularity_settings`) and saves
under a discriminator (the method's registered name): the PEFT pattern, one config per method."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

__all__ = ["MethodSettings"]


@dataclass(kw_only=True)
class MethodSettings:
    """Checked by `validate` and written as a dict; subclasses add the fields and `validate`."""

    # Whether command-line flags generated from these fields (`cli.settings_flags`) default to None (unset: the
    # config's or the recipe's value is used) rather than to the field's default.
    cli_unset_by_default: ClassVar[bool] = False

    def validate(self) -> None:
        """Reject values that would silently give meaningless masks (messages name the field)."""

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def defaults(cls) -> dict[str, Any]:
        """Each field's default (what a config that never set it holds)."""
        return {f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
                for f in dataclasses.fields(cls)}

    @classmethod
    def from_dict(cls, data: dict[str, Any], owner: str = "") -> MethodSettings:
        """These settings from their saved form; an unknown key is refused, naming the known ones."""
        unknown = sorted(set(data) - set(cls.field_names()))
        if unknown:
            raise ValueError(f"PruningConfig: {owner or cls.__name__} has no setting(s) {unknown}; its settings are "
                             f"{cls.field_names()}.")
        return cls(**data)

    @classmethod
    def from_config(cls, config: Any) -> MethodSettings:
        """These settings of a `PruningConfig` (a copy of the config's own object when it holds this class), or read
        off any object with the same attribute names."""
        for own in (getattr(config, "relaxation_settings", None), getattr(config, "granularity_settings", None)):
            if isinstance(own, cls):
                return dataclasses.replace(own)
        return cls(**{name: getattr(config, name) for name in cls.field_names() if hasattr(config, name)})

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
