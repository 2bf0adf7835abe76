"""What a mask covers. Each granularity is a folder with a `Granularity` subclass, registered by name.

`unit` (attention heads and whole MLP blocks, *The Heuristic Core*'s units) is the default; `neuron` (MLP
intermediate neurons) and `weight` (every entry of selected Linear / Conv1D parameters) are the finer ones.
Adding a granularity is a new folder plus one line in `GRANULARITIES` (or `register_granularity(name, cls)` from
outside the package); nothing in `PrunableModel` changes.
"""

from __future__ import annotations

from collections.abc import Iterable

from .._registry import Registry
from .settings import GranularitySettings

GRANULARITIES = Registry("granularity", __name__, {
    "unit": "unit.granularity:UnitGranularity",
    "neuron": "neuron.granularity:NeuronGranularity",
    "weight": "weight.granularity:WeightGranularity",
    "edge": "edge.granularity:EdgeGranularity",
})
# The torch-free half: each granularity's settings dataclass (the PruningConfig fields only it reads).
GRANULARITY_SETTINGS = Registry("granularity", __name__, {
    "unit": "unit.settings:UnitSettings",
    "neuron": "neuron.settings:NeuronSettings",
    "weight": "weight.settings:WeightSettings",
    "edge": "edge.settings:EdgeSettings",
})


def register_granularity(name: str, cls: type) -> type:
    """Make `PruningConfig(granularity=name)` use `cls` (a `granularity.base.Granularity` subclass); its settings are
    `cls.settings_class` (the base `GranularitySettings` when it has none)."""
    GRANULARITY_SETTINGS.register(name, getattr(cls, "settings_class", GranularitySettings))
    return GRANULARITIES.register(name, cls)


def unregister_granularity(name: str) -> None:
    """Undo `register_granularity(name, ...)` (a built-in granularity cannot be removed)."""
    GRANULARITIES.unregister(name)
    GRANULARITY_SETTINGS.unregister(name)


def granularity_settings_class(name: str) -> type[GranularitySettings]:
    """The settings dataclass of granularity `name`, torch-free for the built-in ones."""
    if name in GRANULARITY_SETTINGS:
        return GRANULARITY_SETTINGS.lookup(name)
    return getattr(GRANULARITIES.lookup(name), "settings_class", GranularitySettings)


def get_granularity(name: str) -> type:
    return GRANULARITIES.lookup(name)


def granularity_for_kinds(keys: Iterable[str]) -> str | None:
    """The registered granularity whose `mask_kinds` the mask keys `keys` are (one name); the one keyed by parameter
    names when no registered kind is among them; None when they mix kinds of several granularities or kinds and
    parameter names, or when nothing fits."""
    keys = set(keys)
    classes = {name: get_granularity(name) for name in GRANULARITIES.names()}
    kinds = {name: set(getattr(cls, "mask_kinds", ())) for name, cls in classes.items()}
    matches = [name for name, owned in kinds.items() if keys and owned and keys <= owned]
    if matches:
        return matches[0] if len(matches) == 1 else None
    if keys & set().union(*kinds.values()):
        return None
    by_parameter = [name for name, cls in classes.items() if getattr(cls, "keyed_by_parameter", False)]
    return by_parameter[0] if by_parameter else None


def structured_kinds() -> set[str]:
    """Every mask kind a registered granularity owns (masks keyed otherwise are parameter names)."""
    return {kind for name in GRANULARITIES.names() for kind in getattr(get_granularity(name), "mask_kinds", ())}


def per_layer_kinds() -> set[str]:
    """Mask kinds whose random controls keep the same count per layer row (`Granularity.per_layer_kinds`)."""
    return {kind for name in GRANULARITIES.names()
            for kind in getattr(get_granularity(name), "per_layer_kinds", ())}


__all__ = [
    "GRANULARITIES",
    "GRANULARITY_SETTINGS",
    "GranularitySettings",
    "get_granularity",
    "granularity_for_kinds",
    "granularity_settings_class",
    "per_layer_kinds",
    "register_granularity",
    "structured_kinds",
    "unregister_granularity",
]
