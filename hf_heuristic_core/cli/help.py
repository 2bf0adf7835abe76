"""`--help` text drawn from the flags' dataclasses with plain argparse, so help never imports torch or transformers.

The real parse still goes through `HfArgumentParser` (which needs `TrainingArguments`, hence torch); help only needs
names, defaults and help strings, which the dataclasses carry without importing anything heavy.
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Iterable, Sequence
from typing import Any

HELP_FLAGS = ("-h", "--help")


def wants_help(argv: Sequence[str], flags: Iterable[str] = HELP_FLAGS) -> bool:
    """True when any of `flags` is on the command line (argparse answers help before anything else too)."""
    wanted = set(flags)
    return any(token in wanted for token in argv)


def _metavar(annotation: Any) -> str:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
    text = text.replace(" | None", "").replace("None | ", "")
    if text.startswith("list["):
        return text[5:-1].upper() + " [...]"
    return text.split("[")[0].split(".")[-1].upper()


def _default(item: dataclasses.Field) -> Any:
    if item.default is not dataclasses.MISSING:
        return item.default
    if item.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return item.default_factory()  # type: ignore[misc]
    return dataclasses.MISSING


def add_fields(group: Any, dataclass_type: type, names: Sequence[str] | None = None) -> None:
    """Add `dataclass_type`'s fields (or only `names`, in that order) to an argparse group, for display."""
    by_name = {item.name: item for item in dataclasses.fields(dataclass_type)}
    for name in names or list(by_name):
        item = by_name[name]
        default = _default(item)
        text = item.metadata.get("help", "")
        is_bool = item.type in (bool, "bool") or str(item.type) in ("bool", "bool | None")
        if default is dataclasses.MISSING:
            text = f"{text} (required)"
        elif default is not None and default != []:
            text = f"{text} (default: {default})"
        metavar = "[true|false]" if is_bool else _metavar(item.type)
        group.add_argument(f"--{name}", metavar=metavar, help=text)  # already argparse-escaped


def render_help(prog: str, description: str, groups: Sequence[tuple[str, type, Sequence[str] | None]],
                epilog: str | None = None) -> str:
    """Help text for `prog` with one titled section per (title, dataclass, field names or None for all)."""
    parser = argparse.ArgumentParser(prog=prog, description=description, epilog=epilog, add_help=False,
                                     usage=f"{prog} [flags]",
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-h", "--help", action="store_true", help="Show this help and exit.")
    for title, dataclass_type, names in groups:
        add_fields(parser.add_argument_group(title), dataclass_type, names)
    return parser.format_help()
