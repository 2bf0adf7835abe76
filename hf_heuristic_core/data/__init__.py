"""Data: HANS / MNLI / QQP / PAWS loaders, the offline HANS-style generator, tables from files or the Hub."""

from .nli import *
from .nli import __all__ as _nli_all

__all__ = list(_nli_all)
