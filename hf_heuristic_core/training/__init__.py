"""Learning masks: `PruningArguments` and `PruningTrainer` on the stock Transformers `Trainer`."""

from .arguments import PruningArguments
from .trainer import PruningTrainer

__all__ = ["PruningArguments", "PruningTrainer"]
