"""What a mask covers. Each granularity is a folder with a `Granularity` subclass, registered by name.

`unit` (attention heads and whole MLP blocks, *The Heuristic Core*'s units) is the default; `neuron` (MLP
intermediate neurons) and `weight` (every entry of selected Linear / Conv1D parameters) are the finer ones.
Adding a granularity is a new folder plus one line in `GRANULARITIES` (or `register_granularity(name, cls)` from
outside the package); nothing in `PrunableModel` changes.
"""

from __future__ import annotations

from .._registry import Registry

GRANULARITIES = Registry("granularity", __name__, {
    "unit": "unit.granularity:UnitGranularity",
    "neuron": "neuron.granularity:NeuronGranularity",
    "weight": "weight.granularity:WeightGranularity",
})


def register_granularity(name: str, cls: type) -> type:
    """Make `PruningConfig(granularity=name)` use `cls` (a `granularity.base.Granularity` subclass)."""
    return GRANULARITIES.register(name, cls)


def get_granularity(name: str) -> type:
    return GRANULARITIES.get(name)


__all__ = ["GRANULARITIES", "get_granularity", "register_granularity"]
