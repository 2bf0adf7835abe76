"""The one registry style of the package: a name -> entry mapping with `register` / `unregister`, whose built-in
entries may be "module:attribute" strings imported on first use.

Relaxations, granularities, architecture maps, search strategies and edge-site families are each one `Registry`:
`REGISTRY[name]` reads an entry, `register(name, entry)` (or `REGISTRY[name] = entry`) adds or replaces one, checked
by the registry's `check`; `unregister(name)` removes one added from outside (built-in entries stay), while `del`
is the plain mapping removal a test's `monkeypatch.delitem` uses (and puts back). Config validation only needs the
names, so `PruningConfig` and `hf-heuristic-core --help` never import torch for it: the class behind a lazy name is
imported when it is first looked up.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from typing import Any


class Registry(MutableMapping):
    """Names mapped to entries, or to "module:attribute" strings (relative to `package`) imported on first lookup."""

    def __init__(self, what: str, package: str | None = None, builtins: Mapping[str, Any] | None = None,
                 check: Callable[[str, Any], None] | None = None) -> None:
        self.what = what
        self.package = package
        self.check = check
        self._entries: dict[str, Any] = dict(builtins or {})
        self._builtins = frozenset(self._entries)
        if check is not None:
            for name, entry in self._entries.items():
                if not self._is_lazy(entry):
                    check(name, entry)

    def register(self, name: str, entry: Any) -> Any:
        """Add (or replace) an entry after the registry's check; returns `entry`, so it also works as a decorator's
        body."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"A {self.what} name must be a non-empty string, got {name!r}.")
        if self.check is not None:
            self.check(name, entry)
        self._entries[name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Remove an entry added with `register` (a test's or a script's own); built-in entries stay."""
        if name in self._builtins:
            raise ValueError(f"{name!r} is a built-in {self.what}; only entries added with register can be removed.")
        self._entries.pop(name, None)

    def names(self) -> list[str]:
        return sorted(self._entries)

    def lookup(self, name: str) -> Any:
        """The entry of `name`; an unknown name is a ValueError naming the registered ones."""
        if name not in self._entries:
            raise ValueError(f"Unknown {self.what} {name!r}; choose one of {self.names()} (or register your own).")
        return self[name]

    def __getitem__(self, name: str) -> Any:
        entry = self._entries[name]
        if self._is_lazy(entry):
            module, _, attribute = entry.partition(":")
            entry = getattr(importlib.import_module(f"{self.package}.{module}"), attribute)
            self._entries[name] = entry
        return entry

    def __setitem__(self, name: str, entry: Any) -> None:
        self.register(name, entry)

    def __delitem__(self, name: str) -> None:
        del self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, {self.names()})"

    def _is_lazy(self, entry: Any) -> bool:
        return self.package is not None and isinstance(entry, str)
