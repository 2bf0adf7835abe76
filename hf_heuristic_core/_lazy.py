"""Names a package exports but imports on first use (PEP 562).

Packages whose torch side should not load with them (a config, `--help`, the package root) list their exported
names and the submodule each lives in; `lazy_exports` gives the module-level `__getattr__` and `__dir__` that import
the submodule when a name is first asked for and keep the value in the package's namespace.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, exports: Mapping[str, str],
                 fallback: str | None = None) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """`(__getattr__, __dir__)` for `package` (its `__name__`, called from its `__init__`): `exports` maps a name to
    the submodule (relative to the package) that defines it; a name not listed is looked up in `fallback`, or is an
    `AttributeError`."""
    namespace = vars(sys.modules[package])

    def __getattr__(name: str) -> Any:
        module = exports.get(name, fallback)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        try:
            value = getattr(importlib.import_module(f"{package}.{module}"), name)
        except AttributeError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
