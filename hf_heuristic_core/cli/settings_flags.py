"""Command-line flags generated from the methods' settings dataclasses, so `cli/prune.py` copies none by hand.

Each field of a relaxation's or granularity's settings class (`relaxations/<name>/settings.py`,
`granularity/<name>/settings.py`) becomes a flag of the same name, type and help. Field metadata may refine it:
`cli_type` / `cli_parse` (the flag takes text, e.g. comma-separated, and `cli_parse` turns it into the field's value),
`cli_help` (help that differs on the command line), `brief` (listed by `--help`, not only `--help-all`). A settings
class whose `cli_unset_by_default` is true (the relaxations': their constants are the recipe's or the config's
unless given) gives flags that default to None, "unset"; the others' flags default to the field's default.
Torch-free, so `--help` stays fast.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = ["flag_values", "settings_flags", "settings_flags_dataclass", "unset_flags_check"]


@dataclasses.dataclass(frozen=True)
class SettingsFlag:
    """One generated flag: the settings class it comes from and how the command line reads it."""

    name: str
    owner: type
    type: Any
    default: Any
    help: str
    brief: bool
    parse: Any = None   # text -> the field's value (None: the parsed flag is the value)


def settings_flags(classes: Iterable[type], exclude: Iterable[str] = ()) -> list[SettingsFlag]:
    """The flags of every field of `classes` (a field two classes share is taken from the first), in order."""
    flags: dict[str, SettingsFlag] = {}
    skip = set(exclude)
    for cls in classes:
        hints = typing.get_type_hints(cls)
        unset = bool(getattr(cls, "cli_unset_by_default", False))
        for item in dataclasses.fields(cls):
            if item.name in flags or item.name in skip or not item.init:
                continue
            default = item.default if item.default is not dataclasses.MISSING else item.default_factory()
            kind = item.metadata.get("cli_type", hints[item.name])
            help_text = item.metadata.get("cli_help") or item.metadata.get("help", "")
            if unset:
                shown = f"{default:g}" if isinstance(default, float) else default
                help_text = help_text if "cli_help" in item.metadata else f"{help_text} Unset: {shown}."
                kind, default = (kind if _allows_none(kind) else kind | None), None
            flags[item.name] = SettingsFlag(item.name, cls, kind, default, help_text,
                                            bool(item.metadata.get("brief", not unset)), item.metadata.get("cli_parse"))
    return list(flags.values())


def settings_flags_dataclass(flags: Sequence[SettingsFlag], name: str = "SettingsFlags") -> type:
    """A keyword-only dataclass with one field per flag (`HfArgumentParser` and the fast help read it)."""
    fields = [(f.name, f.type, dataclasses.field(default=f.default, metadata={"help": f.help})) for f in flags]
    cls = dataclasses.make_dataclass(name, fields, kw_only=True)
    cls.__doc__ = "Flags generated from the settings dataclasses (`cli.settings_flags`)."
    return cls


def flag_values(parsed: Any, flags: Sequence[SettingsFlag]) -> dict[str, Any]:
    """The `PruningConfig` keywords the parsed flags give: unset ones are left out, text is parsed (ValueError with
    the flag's name when it cannot be)."""
    values: dict[str, Any] = {}
    for flag in flags:
        value = getattr(parsed, flag.name)
        if value is not None and flag.parse is not None and isinstance(value, str):
            value = flag.parse(value)
        if value is not None:
            values[flag.name] = value
    return values


def unset_flags_check(values: Mapping[str, Any], flags: Sequence[SettingsFlag], chosen: Iterable[type],
                      chosen_label: str) -> None:
    """Refuse non-finite numbers, and a given flag of a settings class whose flags are unset by default but that is
    not among `chosen` (a relaxation's constant given for another relaxation would change nothing)."""
    chosen_names = {name for cls in chosen for name in (f.name for f in dataclasses.fields(cls))}
    for flag in flags:
        if flag.name not in values:
            continue
        value = values[flag.name]
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"--{flag.name} {value} must be a finite number.")
        if getattr(flag.owner, "cli_unset_by_default", False) and flag.name not in chosen_names:
            raise ValueError(f"--{flag.name} is a setting of {flag.owner.__name__}, which {chosen_label} does not "
                             "read, so it would change nothing; drop the flag or choose the method it belongs to.")


def _allows_none(kind: Any) -> bool:
    return type(None) in typing.get_args(kind)
