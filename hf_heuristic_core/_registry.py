"""A name -> class registry whose built-in entries are imported on first use.

Config validation only needs the names, so `PruningConfig` and `hf-heuristic-core --help` never import torch for
it; the class behind a name is imported when a model is wrapped.
"""

from __future__ import annotations

import importlib
from typing import Any


class Registry:
    """Names mapped to classes, or to "module:Class" strings (relative to `package`) imported on first lookup."""

    def __init__(self, what: str, package: str, builtins: dict[str, str]) -> None:
        self.what = what
        self.package = package
        self._entries: dict[str, Any] = dict(builtins)
        self._builtins = frozenset(builtins)

    def register(self, name: str, cls: type) -> type:
        """Add (or replace) an entry; returns `cls`, so it also works as a decorator's body."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"A {self.what} name must be a non-empty string, got {name!r}.")
        self._entries[name] = cls
        return cls

    def unregister(self, name: str) -> None:
        """Remove an entry added with `register` (a test's or a script's own method); built-in entries stay."""
        if name in self._builtins:
            raise ValueError(f"{name!r} is a built-in {self.what}; only entries added with register can be removed.")
        self._entries.pop(name, None)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def get(self, name: str) -> type:
        if name not in self._entries:
            raise ValueError(f"Unknown {self.what} {name!r}; choose one of {self.names()} (or register your own).")
        entry = self._entries[name]
        if isinstance(entry, str):
            module, _, attribute = entry.partition(":")
            entry = getattr(importlib.import_module(f"{self.package}.{module}"), attribute)
            self._entries[name] = entry
        return entry
