"""`--help` text drawn from the flags' dataclasses with plain argparse, so help never imports torch or transformers.

The real parse still goes through `HfArgumentParser` (which needs `TrainingArguments`, hence torch); help only needs
names, defaults and help strings, which the dataclasses carry without importing anything heavy.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import importlib.util
from collections.abc import Iterable, Sequence
from pathlib import Path
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
    """Add `dataclass_type`'s fields (or only `names`, in that order) to an argparse group, for display. A class
    attribute `flag_choices` (flag -> a function returning the names it accepts, e.g. a registry's `names`) lists
    each such flag's choices from where they are registered, not from a copy."""
    by_name = {item.name: item for item in dataclasses.fields(dataclass_type)}
    choices = getattr(dataclass_type, "flag_choices", {})
    for name in names or list(by_name):
        item = by_name[name]
        default = _default(item)
        text = item.metadata.get("help", "")
        if name in choices:   # read when help is drawn, so a method registered since shows up
            text = f"{text} One of: {', '.join(choices[name]())}."
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


@dataclasses.dataclass
class SourceField:
    """A dataclass field read from source code (name, type text, default, help), for help without importing."""

    name: str
    type: str
    default: Any
    metadata: dict[str, Any]
    default_factory: Any = dataclasses.MISSING


def _literal(node: Any) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return ast.unparse(node)


def source_fields(package: str, relative_file: str, class_name: str) -> list[SourceField]:
    """The init fields of dataclass `class_name` in `package/relative_file`, parsed with `ast` instead of imported:
    `transformers.training_args` imports torch (seconds), its source parses in milliseconds. Defaults and help
    strings that are not literals are shown as source text."""
    spec = importlib.util.find_spec(package)   # a top-level package: found without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"{package} is not installed")
    tree = ast.parse((Path(list(spec.submodule_search_locations)[0]) / relative_file).read_text())
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == class_name)
    found = []
    for statement in cls.body:
        if not (isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)):
            continue
        name, kind = statement.target.id, ast.unparse(statement.annotation)
        value = statement.value
        default: Any = dataclasses.MISSING if value is None else _literal(value)
        factory: Any = dataclasses.MISSING
        metadata: dict[str, Any] = {}
        if isinstance(value, ast.Call) and ast.unparse(value.func) in ("field", "dataclasses.field"):
            keywords = {k.arg: k.value for k in value.keywords}
            if "init" in keywords and _literal(keywords["init"]) is False:
                continue
            default = _literal(keywords["default"]) if "default" in keywords else dataclasses.MISSING
            if "default_factory" in keywords:
                factory = ast.unparse(keywords["default_factory"])
            meta = keywords.get("metadata")
            if isinstance(meta, ast.Dict):
                metadata = {_literal(k): _literal(v) for k, v in zip(meta.keys, meta.values) if k is not None}
        found.append(SourceField(name, kind, default, metadata, factory))
    return found


def add_source_fields(group: Any, fields: Sequence[SourceField], notes: dict[str, str] | None = None) -> None:
    """`add_fields` for fields read by `source_fields`; `notes` are appended to the named fields' help."""
    for item in fields:
        text = str(item.metadata.get("help", "")).replace("%", "%%")
        if item.default is not dataclasses.MISSING and item.default is not None and item.default != []:
            text = f"{text} (default: {item.default})"
        if notes and item.name in notes:
            text = f"{text} {notes[item.name]}"
        is_bool = item.type in ("bool", "bool | None")
        group.add_argument(f"--{item.name}", metavar="[true|false]" if is_bool else _metavar(item.type), help=text)


def render_source_help(prog: str, description: str, groups: Sequence[tuple[str, Any, Any]],
                       epilog: str | None = None) -> str:
    """`render_help` with some groups given as `SourceField` lists: (title, fields, notes)."""
    parser = argparse.ArgumentParser(prog=prog, description=description, epilog=epilog, add_help=False,
                                     usage=f"{prog} [flags]", formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-h", "--help", action="store_true", help="Show this help and exit.")
    for title, fields, names in groups:
        group = parser.add_argument_group(title)
        if isinstance(fields, type):
            add_fields(group, fields, names)
        else:
            add_source_fields(group, fields, names)
    return parser.format_help()
