"""How mask values are drawn from learned logits. Each relaxation is a class registered by name.

`hard_concrete` (Louizos et al., as in CoFi and *The Heuristic Core*) is the default; `continuous_sparsification`
(Lepori et al., Zhang et al.) and `gumbel_sigmoid` (Csordás et al.) are the weight-mask papers' relaxations.
A new relaxation is a module with a `Relaxation` subclass plus one line in `RELAXATIONS` (or
`register_relaxation(name, cls)` from outside).
"""

from __future__ import annotations

from .._registry import Registry

RELAXATIONS = Registry("relaxation", __name__, {
    "hard_concrete": "hard_concrete:HardConcrete",
    "continuous_sparsification": "continuous_sparsification:ContinuousSparsification",
    "gumbel_sigmoid": "gumbel_sigmoid:GumbelSigmoid",
})


def register_relaxation(name: str, cls: type) -> type:
    """Make `PruningConfig(relaxation=name)` use `cls` (a `relaxations.base.Relaxation` subclass)."""
    return RELAXATIONS.register(name, cls)


def get_relaxation(name: str) -> type:
    return RELAXATIONS.get(name)


__all__ = ["RELAXATIONS", "get_relaxation", "register_relaxation"]
