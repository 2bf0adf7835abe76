"""Learning masks: `PruningArguments` and `PruningTrainer` on the stock Transformers `Trainer`.

Both are imported on first use, so the torch-free `training.fields` (which `prune --help` reads) stays fast to import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports

__all__ = ["PruningArguments", "PruningTrainer"]
_EXPORTS = {"PruningArguments": "arguments", "PruningTrainer": "trainer"}


__getattr__, _ = lazy_exports(__name__, _EXPORTS)


if TYPE_CHECKING:  # pragma: no cover
    from .arguments import PruningArguments
    from .trainer import PruningTrainer
