"""How mask values are drawn from learned logits. Each relaxation is a class registered by name.

`hard_concrete` (Louizos et al., as in CoFi and *The Heuristic Core*) is the default; `continuous_sparsification`
(Lepori et al., Zhang et al.) and `gumbel_sigmoid` (Csordás et al.) are the weight-mask papers' relaxations.
A relaxation is a folder: `settings.py` (a torch-free `RelaxationSettings` dataclass: its constants, their
validation, and the paper defaults that depend on it) and `relaxation.py` (the `Relaxation` subclass), plus one line
in `RELAXATIONS` and `RELAXATION_SETTINGS` (or `register_relaxation(name, cls)` from outside, which takes the
settings from `cls.settings_class`). Nothing outside this folder switches on a relaxation's name.
"""

from __future__ import annotations

from .._registry import Registry
from .settings import RelaxationSettings

RELAXATIONS = Registry("relaxation", __name__, {
    "hard_concrete": "hard_concrete.relaxation:HardConcrete",
    "continuous_sparsification": "continuous_sparsification.relaxation:ContinuousSparsification",
    "gumbel_sigmoid": "gumbel_sigmoid.relaxation:GumbelSigmoid",
})
# The torch-free half, so that PruningConfig resolves a relaxation's defaults without importing torch.
RELAXATION_SETTINGS = Registry("relaxation", __name__, {
    "hard_concrete": "hard_concrete.settings:HardConcreteSettings",
    "continuous_sparsification": "continuous_sparsification.settings:ContinuousSparsificationSettings",
    "gumbel_sigmoid": "gumbel_sigmoid.settings:GumbelSigmoidSettings",
})


def register_relaxation(name: str, cls: type) -> type:
    """Make `PruningConfig(relaxation=name)` use `cls` (a `relaxations.base.Relaxation` subclass); its settings are
    `cls.settings_class` (the base `RelaxationSettings` when it has no constants)."""
    RELAXATION_SETTINGS.register(name, getattr(cls, "settings_class", RelaxationSettings))
    return RELAXATIONS.register(name, cls)


def unregister_relaxation(name: str) -> None:
    """Undo `register_relaxation(name, ...)` (a built-in relaxation cannot be removed)."""
    RELAXATIONS.unregister(name)
    RELAXATION_SETTINGS.unregister(name)


def get_relaxation(name: str) -> type:
    return RELAXATIONS.lookup(name)


def relaxation_settings_class(name: str) -> type[RelaxationSettings]:
    """The settings dataclass of relaxation `name`, torch-free for the built-in ones."""
    if name in RELAXATION_SETTINGS:
        return RELAXATION_SETTINGS.lookup(name)
    return getattr(RELAXATIONS.lookup(name), "settings_class", RelaxationSettings)


__all__ = ["RELAXATIONS", "RELAXATION_SETTINGS", "RelaxationSettings", "get_relaxation", "register_relaxation",
           "relaxation_settings_class", "unregister_relaxation"]
