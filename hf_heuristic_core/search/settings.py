"""What one effective-size search is asked to do, validated in one place: `SearchSettings`.

The same settings reach the search from four doors (`search_effective_size`, `track_effective_size`,
`EffectiveSizeCallback`, the CLI and the study); each used to re-check them. Now each builds a `SearchSettings`, whose
checks name the bad value and the fix, and whose `block()` is the settings block of a results file.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping, Sequence

from ..evaluation.effective_size import EffectiveSizeError
from .climb import ClimbSchedule

__all__ = ["DEFAULT_MARGIN", "DEFAULT_SPARSITIES", "DEFAULT_STRATEGY", "SearchSettings", "check_groups",
           "check_margin", "check_seeds", "check_sparsities"]

from .defaults import DEFAULT_SPARSITIES, DEFAULT_STRATEGY  # noqa: E402  (torch-free, read by CLI help)
from .strategies import get_strategy
DEFAULT_MARGIN = 0.03


def check_sparsities(sparsities: Iterable[float]) -> list[float]:
    """Sorted, de-duplicated fractions in [0, 1); anything else is a clear error (50 is not 0.5)."""
    if isinstance(sparsities, (str, bytes)) or not isinstance(sparsities, Iterable):
        raise EffectiveSizeError(f"sparsities must be a list of fractions, e.g. [0.1, 0.2, 0.3], got {sparsities!r}")
    values = []
    for value in sparsities:
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
                or not 0.0 <= float(value) < 1.0:
            hint = " (pass fractions, e.g. 0.5 for 50%)" if isinstance(value, numbers.Real) and value >= 1 else ""
            raise EffectiveSizeError(f"sparsity {value!r} is outside [0, 1){hint}; every level is the fraction of "
                                     "the masked units pruned (heads and MLP blocks, neurons or weights).")
        values.append(float(value))
    if not values:
        raise EffectiveSizeError("sparsities is empty; pass at least one level, e.g. [0.1, 0.2, ..., 0.7].")
    if len(set(values)) != len(values):
        raise EffectiveSizeError(f"sparsities lists a level twice: {values}; list each level once.")
    return sorted(values)


def check_seeds(seeds: Iterable[int]) -> list[int]:
    """A non-empty list of distinct integer pruning seeds (each seed repeats the search)."""
    values = list(seeds) if isinstance(seeds, Iterable) and not isinstance(seeds, (str, bytes)) else None
    if not values or any(isinstance(s, bool) or not isinstance(s, numbers.Integral) for s in values):
        raise EffectiveSizeError(f"seeds must be a non-empty list of integers, e.g. [0, 1, 2], got {seeds!r}")
    if len(set(values)) != len(values):
        raise EffectiveSizeError(f"seeds lists a seed twice: {values}")
    return [int(s) for s in values]


def check_margin(margin: float) -> float:
    if isinstance(margin, bool) or not isinstance(margin, numbers.Real) or not math.isfinite(margin) or margin < 0:
        raise EffectiveSizeError(f"margin must be a finite number >= 0 (e.g. 0.03 for 3 points), got {margin!r}")
    return float(margin)


def check_groups(groups: Mapping[str, Sequence[str]] | None, cases: Iterable[str]) -> dict[str, list[str]]:
    """Groups map a name (ID / OOD / mixed) to evaluation-set names; default: one group ``all`` of every set."""
    available = list(cases)
    if not available:
        raise EffectiveSizeError("eval_sets is empty; pass at least one labelled evaluation set, e.g. {'id': data}.")
    if groups is None:
        return {"all": available}
    if not isinstance(groups, Mapping) or not groups:
        raise EffectiveSizeError(f"groups must be a non-empty mapping of group name -> evaluation-set names, e.g. "
                                 f"{{'ID': ['id_eval'], 'OOD': [...]}}, got {groups!r}")
    resolved: dict[str, list[str]] = {}
    for name, members in groups.items():
        if isinstance(members, (str, bytes)) or not isinstance(members, Iterable):
            raise EffectiveSizeError(f"group {name!r} must list evaluation-set names, not {members!r}; "
                                     f"wrap a single name: [{members!r}]")
        members = list(members)
        if not members:
            raise EffectiveSizeError(f"group {name!r} is empty; list at least one evaluation set of {available}.")
        if len(set(members)) != len(members):
            raise EffectiveSizeError(f"group {name!r} lists an evaluation set twice: {members}")
        unknown = [m for m in members if m not in available]
        if unknown:
            raise EffectiveSizeError(f"group {name!r} names {unknown}, which are not evaluation sets; the evaluation "
                                     f"sets are {available}.")
        resolved[str(name)] = members
    return resolved


@dataclass
class SearchSettings:
    """Strategy, levels, seeds, groups, margin and run length of a search, checked on construction.

    `steps_per_run` None takes the strategy's default (grid 200, nested 100; the climb's length comes from `climb`).
    `groups` None means one group of every evaluation set; `resolve(cases)` checks the groups against the evaluation
    sets. `early_stopping` evaluates each group's levels sparsest first and stops at the first faithful one (same
    effective sizes, fewer evaluations); False evaluates every level on every set.
    """

    strategy: str = DEFAULT_STRATEGY
    sparsities: Sequence[float] = DEFAULT_SPARSITIES
    seeds: Sequence[int] = (0,)
    groups: Mapping[str, Sequence[str]] | None = None
    margin: float = DEFAULT_MARGIN
    steps_per_run: int | None = None
    climb: ClimbSchedule = field(default_factory=ClimbSchedule)
    early_stopping: bool = True

    def __post_init__(self) -> None:
        strategy = get_strategy(self.strategy)
        self.sparsities = check_sparsities(self.sparsities)
        self.seeds = check_seeds(self.seeds)
        self.margin = check_margin(self.margin)
        if self.climb is None:
            self.climb = ClimbSchedule()
        if not isinstance(self.climb, ClimbSchedule):
            raise EffectiveSizeError(f"climb must be a ClimbSchedule, got {type(self.climb).__name__}")
        if self.steps_per_run is None:
            self.steps_per_run = strategy.default_steps
        elif strategy.default_steps is not None and (
                isinstance(self.steps_per_run, bool) or not isinstance(self.steps_per_run, numbers.Integral)
                or self.steps_per_run < 1):
            raise EffectiveSizeError(f"steps_per_run must be a positive integer, got {self.steps_per_run!r}")
        if not isinstance(self.early_stopping, bool):
            raise EffectiveSizeError(f"early_stopping must be True or False, got {self.early_stopping!r}")
        if self.groups is not None:
            self.groups = {str(k): list(v) if not isinstance(v, (str, bytes)) and isinstance(v, Iterable) else v
                           for k, v in self.groups.items()} if isinstance(self.groups, Mapping) else self.groups

    def resolve(self, cases: Iterable[str]) -> "SearchSettings":
        """A copy whose groups are checked against the evaluation-set names (and filled in when None)."""
        return replace(self, groups=check_groups(self.groups, cases))

    def block(self) -> dict[str, Any]:
        """The settings block of a results file (the run length under the key its strategy uses)."""
        block: dict[str, Any] = {"strategy": self.strategy, "sparsities": list(self.sparsities),
                                 "seeds": list(self.seeds), "groups": self.groups, "margin": self.margin}
        if get_strategy(self.strategy).default_steps is not None:
            block["steps_per_run"] = int(self.steps_per_run)
        else:
            block["climb"] = vars(self.climb).copy()
        block["early_stopping"] = self.early_stopping
        return block
