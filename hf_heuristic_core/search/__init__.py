"""Effective size over fine-tuning: the search of one checkpoint, the resumable tracker and the Trainer callback."""

from .run import *  # noqa: F401,F403
from .run import __all__ as _run_all

__all__ = list(_run_all)
