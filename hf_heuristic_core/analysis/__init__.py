"""Multi-seed analyses: `prune_many`, ablation tables, mask statistics, attention patterns and the `analyze` report."""

from .prune_many import *  # noqa: F401,F403
from .prune_many import __all__ as _prune_many_all

__all__ = list(_prune_many_all)
