"""`EffectiveSizeSearch`: everything one search of one checkpoint measured, JSON round-trippable."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping

__all__ = ["EffectiveSizeSearch", "level_key"]

# Tables keyed by seed, then by sparsity (stored with string keys in JSON).
SEED_LEVEL_TABLES = ("pruned_accuracy", "evaluations", "masks", "evaluated", "converged")


def level_key(sparsity: float) -> str:
    return format(sparsity, ".6g")


@dataclass
class EffectiveSizeSearch:
    """Everything one search measured. ``effective_size[group]`` is the mean over seeds of
    ``effective_size_per_seed[group][seed]``.

    With early stopping (``early_stopping``) a level is evaluated only on the sets of the groups that still needed it:
    ``evaluated[seed][sparsity]`` lists those sets, and ``pruned_accuracy`` / ``evaluations`` hold exactly them.
    ``masks`` always holds every level, so the search can be re-scored in full (`search_effective_size(masks=...)`).
    ``converged[seed][sparsity]`` is the verdict of the pruning run that produced the level's masks (one run per seed
    for nested and climb, so every level of a seed shares it; None: trivial level or no check).
    """

    strategy: str
    sparsities: list[float]
    seeds: list[int]
    groups: dict[str, list[str]]
    margin: float
    full_accuracy: dict[str, float]
    pruned_accuracy: dict[int, dict[float, dict[str, float]]]
    evaluations: dict[int, dict[float, dict[str, dict[str, float]]]]
    effective_size: dict[str, float]
    effective_size_per_seed: dict[str, dict[int, float]]
    effective_size_std: dict[str, float]
    cost_steps: int
    masks: dict[int, dict[float, dict[str, list]]]
    runs: list[dict[str, Any]] = field(default_factory=list)
    wall_seconds: float = 0.0
    early_stopping: bool = False
    evaluated: dict[int, dict[float, list[str]]] = field(default_factory=dict)
    converged: dict[int, dict[float, bool | None]] = field(default_factory=dict)
    evaluation_seconds: float = 0.0

    def group_full_accuracy(self) -> dict[str, float]:
        """Unweighted mean of the full model's accuracy over each group's cases (as the definition uses it)."""
        return {g: math.fsum(self.full_accuracy[c] for c in cases) / len(cases) for g, cases in self.groups.items()}

    def effective_size_range(self) -> dict[str, tuple[float, float]]:
        """(min, max) over seeds of each group's effective size: the band around the mean."""
        return {g: (min(t.values()), max(t.values())) for g, t in self.effective_size_per_seed.items()}

    def evaluation_count(self) -> int:
        """(level, set) evaluations of pruned subnetworks this search ran, over all seeds."""
        return sum(len(cases) for table in self.evaluated.values() for cases in table.values())

    def records(self, step: int | None = None) -> list[dict[str, Any]]:
        """Rows for `plotting.plot_effective_size`: one per (group, seed)."""
        full = self.group_full_accuracy()
        return [{"step": step, "seed": seed, "group": group, "effective_size": size, "full_accuracy": full[group]}
                for group, per_seed in self.effective_size_per_seed.items() for seed, size in per_seed.items()]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: sparsity and seed keys become strings ("0.3", "0")."""
        data = asdict(self)
        for name in SEED_LEVEL_TABLES:
            data[name] = {str(seed): {level_key(s): v for s, v in table.items()}
                          for seed, table in data[name].items()}
        data["effective_size_per_seed"] = {g: {str(seed): v for seed, v in t.items()}
                                           for g, t in data["effective_size_per_seed"].items()}
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "EffectiveSizeSearch":
        values = dict(data)
        for name in SEED_LEVEL_TABLES:
            values[name] = {int(seed): {float(s): v for s, v in table.items()}
                            for seed, table in values.get(name, {}).items()}
        values["effective_size_per_seed"] = {g: {int(seed): v for seed, v in t.items()}
                                             for g, t in values["effective_size_per_seed"].items()}
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in values.items() if k in known})
