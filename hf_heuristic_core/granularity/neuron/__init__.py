"""The `neuron` granularity: one mask per MLP intermediate neuron: `settings` (torch-free, composed into
`PruningConfig`) and `granularity` (the torch side).

The granularity module is imported on first attribute access, so importing the settings (a config, `--help`) never
imports torch; `from hf_heuristic_core.granularity.neuron import X` keeps working for every name it defines.
"""

from __future__ import annotations

from ..._lazy import lazy_exports
from . import settings
from .settings import *
from .settings import NeuronSettings

# The names of the torch-side modules (imported on first use), and the module each lives in.
_LAZY_NAMES = {'NeuronGranularity': 'granularity'}
__all__ = [*_LAZY_NAMES, *settings.__all__]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY_NAMES)
