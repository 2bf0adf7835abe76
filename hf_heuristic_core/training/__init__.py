"""Learning masks: `PruningArguments` and `PruningTrainer` on the stock Transformers `Trainer`.

Both are imported on first use, so the torch-free `training.fields` (which `prune --help` reads) stays fast to import.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["PruningArguments", "PruningTrainer"]
_EXPORTS = {"PruningArguments": "arguments", "PruningTrainer": "trainer"}


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value
    return value


if TYPE_CHECKING:  # pragma: no cover
    from .arguments import PruningArguments
    from .trainer import PruningTrainer
