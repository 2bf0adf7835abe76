"""Effective size: the size of the smallest pruned subnetwork that is still faithful to the full model.

Definition (The Heuristic Core, section 5 / Figure 6, as implemented here)
--------------------------------------------------------------------------
Inputs: the full model's accuracy per evaluation case, ``full_accuracy = {case: acc}``, and the accuracy of a pruned
subnetwork at each sparsity of a grid, ``pruned_accuracy = {sparsity: {case: acc}}``, sparsities as fractions of
pruned units in ``[0, 1)``. An evaluation set ``D`` is a list of cases (``cases``; default: every case of
``full_accuracy``); the paper uses ID = MNLI matched + mismatched, OOD = the four HANS subcases, mixed = all six.

* ``mean_full = mean(full_accuracy[c] for c in D)`` and, per sparsity ``s``,
  ``mean_s = mean(pruned_accuracy[s][c] for c in D)``: unweighted means over cases, so each case counts equally.
* Sparsity ``s`` is *faithful* iff ``mean_s > mean_full - margin`` (strict; ``margin`` is absolute, one-sided: a
  subnetwork that beats the full model is faithful).
* ``effective_size = 1 - max{s : s faithful}``, or ``1.0`` when no sparsity is faithful. The maximum is taken over
  all faithful sparsities, so in a non-monotone table an unfaithful sparsity below a faithful one does not matter.

Accuracies and ``margin`` must be on the same scale (fractions with ``margin=0.03`` = 3 points). The released code
computes the effective size per pruning seed and then averages; :func:`effective_size_per_seed` does that.
"""

from __future__ import annotations

import math
import numbers
import statistics
from typing import Any, Callable, Hashable, Iterable, Mapping, Sequence

from ..errors import PruningError
from ..relaxations.binarize import check_sparsity

__all__ = ["EffectiveSizeError", "effective_size", "effective_size_per_seed", "effective_sizes_by_scan"]


class EffectiveSizeError(PruningError, ValueError):
    """An accuracy table, case list, sparsity or margin passed to the effective-size computation is invalid."""


def _check_margin(margin: float) -> float:
    if isinstance(margin, bool) or not isinstance(margin, numbers.Real) or not math.isfinite(margin):
        raise EffectiveSizeError(f"margin must be a finite number, got {margin!r}; e.g. margin=0.03 for 3 points")
    if margin < 0:
        raise EffectiveSizeError(f"margin must be >= 0, got {margin!r}; it is the allowed drop, e.g. 0.03")
    return float(margin)


def _resolve_cases(full_accuracy: Mapping[Hashable, float], cases: Iterable[Hashable] | None) -> list[Hashable]:
    """The evaluation set: explicit cases, or every case of the full model."""
    if not isinstance(full_accuracy, Mapping) or len(full_accuracy) == 0:
        raise EffectiveSizeError(
            "full_accuracy is empty (or not a mapping); pass the full model's accuracy per case, "
            "e.g. {'validation_matched': 0.83}"
        )
    if cases is None:
        return list(full_accuracy)
    if isinstance(cases, (str, bytes)):
        raise EffectiveSizeError(f"cases must be a collection of case names, not one string; wrap it: [{cases!r}]")
    resolved = list(cases)
    if not resolved:
        raise EffectiveSizeError("cases is empty; pass at least one case name, or None to use every case")
    duplicates = sorted({str(c) for c in resolved if resolved.count(c) > 1})
    if duplicates:
        raise EffectiveSizeError(f"cases lists {duplicates} more than once; list each case once")
    missing = [c for c in resolved if c not in full_accuracy]
    if missing:
        raise EffectiveSizeError(
            f"case {missing[0]!r} is not in full_accuracy (it has {sorted(map(str, full_accuracy))}); "
            "fix the case name or add the full model's accuracy for it"
        )
    return resolved


def _accuracy(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise EffectiveSizeError(f"{where} is {value!r}; accuracies must be finite numbers (re-run that evaluation)")
    return float(value)


def _mean_accuracy(table: Mapping[Hashable, Any], cases: list[Hashable], where: str) -> float:
    """Unweighted mean over cases; `where` names the table in error messages."""
    if not isinstance(table, Mapping):
        raise EffectiveSizeError(f"{where} must map case -> accuracy, got {type(table).__name__}")
    values = []
    for case in cases:
        if case not in table:
            raise EffectiveSizeError(
                f"{where} has no accuracy for case {case!r}; evaluate that subnetwork on it or drop it from cases"
            )
        values.append(_accuracy(table[case], f"{where}[{case!r}]"))
    return math.fsum(values) / len(values)


def _check_sparsity(sparsity: Any) -> float:
    if isinstance(sparsity, bool) or not isinstance(sparsity, numbers.Real):
        raise EffectiveSizeError(
            f"sparsity key {sparsity!r} is not a number; use fractions as keys, e.g. 0.5 "
            "(convert JSON string keys of percents with float(key) / 100)"
        )
    return check_sparsity(sparsity, f"sparsity {sparsity!r}", error=EffectiveSizeError)


def effective_size(
    full_accuracy: Mapping[Hashable, float],
    pruned_accuracy: Mapping[float, Mapping[Hashable, float]],
    cases: Iterable[Hashable] | None = None,
    margin: float = 0.03,
) -> float:
    """``1 - (highest faithful sparsity)``, or 1.0 if none is faithful; see the module docstring for the definition.

    A sparsity is faithful when the mean pruned accuracy over ``cases`` is strictly greater than the full model's
    mean over the same cases minus ``margin``.
    """
    margin = _check_margin(margin)
    selected = _resolve_cases(full_accuracy, cases)
    threshold = _mean_accuracy(full_accuracy, selected, "full_accuracy") - margin
    if not isinstance(pruned_accuracy, Mapping) or len(pruned_accuracy) == 0:
        raise EffectiveSizeError(
            "pruned_accuracy is empty (or not a mapping); pass {sparsity: {case: accuracy}}, e.g. {0.5: {...}}"
        )
    best: float | None = None
    for sparsity, table in pruned_accuracy.items():
        s = _check_sparsity(sparsity)
        mean = _mean_accuracy(table, selected, f"pruned_accuracy[{sparsity!r}]")
        if mean > threshold and (best is None or s > best):
            best = s
    return 1.0 if best is None else 1.0 - best


# A bound decides a level only when it clears the threshold by more than float rounding could ever move a mean of
# accuracies in [0, 1]; closer calls are settled by evaluating every set, with the definition's own arithmetic.
_BOUND_SLACK = 1e-9


def effective_sizes_by_scan(
    full_accuracy: Mapping[Hashable, float],
    levels: Iterable[float],
    groups: Mapping[str, Sequence[Hashable]],
    evaluate: Callable[[float, list[Hashable]], Mapping[Hashable, float]],
    margin: float = 0.03,
    table: dict[float, dict[Hashable, float]] | None = None,
    costs: Mapping[Hashable, float] | None = None,
) -> tuple[dict[str, float], dict[float, dict[Hashable, float]]]:
    """`effective_size` of every group, asking `evaluate(level, [case])` only for the accuracies the answer needs.

    Per group, the levels are scanned from the sparsest down and the scan stops at the first faithful one: that is
    the largest faithful sparsity, so the answer equals `effective_size` on the full table, monotone or not (levels
    below it cannot change a maximum). Within a level, the group's missing sets are evaluated cheapest first
    (`costs`, e.g. examples per set; default: as listed), and the level is decided as soon as the sets still missing
    cannot change the verdict: accuracies lie in [0, 1], so the mean is at least (known sum) / n and at most
    (known sum + missing count) / n. Accuracies are cached in `table` (``{level: {case: accuracy}}``, also returned),
    so groups that share evaluation sets (ID and OOD inside mixed) share their evaluations. Pass a pre-filled `table`
    to score a full evaluation the same way. When every set of a group is known, the arithmetic (threshold,
    unweighted mean over the group's cases in order, strict ``>``) is `effective_size`'s own.
    """
    margin = _check_margin(margin)
    ordered = sorted({_check_sparsity(level) for level in levels}, reverse=True)
    if not ordered:
        raise EffectiveSizeError("levels is empty; pass at least one sparsity, e.g. [0.1, 0.2, ..., 0.7]")
    if not isinstance(groups, Mapping) or not groups:
        raise EffectiveSizeError("groups is empty; pass {group: [case, ...]}, e.g. {'ID': ['validation_matched']}")
    cost = (lambda case: 0.0) if costs is None else (lambda case: float(costs.get(case, 0.0)))
    table = {} if table is None else table
    sizes: dict[str, float] = {}
    for group, cases in groups.items():
        selected = _resolve_cases(full_accuracy, cases)
        threshold = _mean_accuracy(full_accuracy, selected, "full_accuracy") - margin
        sizes[group] = 1.0
        for level in ordered:
            row = table.setdefault(level, {})
            if _faithful(row, selected, threshold, level, evaluate, cost):
                sizes[group] = 1.0 - level
                break
    return sizes, table


def _faithful(row: dict[Hashable, float], selected: list[Hashable], threshold: float, level: float,
              evaluate: Callable[[float, list[Hashable]], Mapping[Hashable, float]],
              cost: Callable[[Hashable], float]) -> bool:
    """Whether `level` is faithful on `selected`, evaluating missing sets (into `row`) only until it is decided."""
    count = len(selected)
    for case in sorted((c for c in selected if c not in row), key=cost):
        known = math.fsum(row[c] for c in selected if c in row)
        missing = sum(1 for c in selected if c not in row)
        if known / count > threshold + _BOUND_SLACK:                    # faithful even if the rest scored 0
            return True
        if (known + missing) / count < threshold - _BOUND_SLACK:        # unfaithful even if the rest scored 1
            return False
        found = evaluate(level, [case])
        if case not in found:
            raise EffectiveSizeError(f"evaluate({level!r}, ...) returned no accuracy for case {case!r}")
        value = _accuracy(found[case], f"accuracy of sparsity {level!r} on {case!r}")
        if not 0.0 <= value <= 1.0:
            raise EffectiveSizeError(f"accuracy of sparsity {level!r} on {case!r} is {value!r}; accuracies are "
                                     "fractions in [0, 1]")
        row[case] = value
    return _mean_accuracy(row, selected, f"pruned_accuracy[{level!r}]") > threshold   # every set known


def effective_size_per_seed(
    full_accuracy: Mapping[Hashable, float],
    pruned_by_seed: Mapping[Hashable, Mapping[float, Mapping[Hashable, float]]],
    cases: Iterable[Hashable] | None = None,
    margin: float = 0.03,
) -> dict[str, Any]:
    """Effective size per pruning seed, then mean and std across seeds (the released code's order of operations).

    Returns ``{"per_seed": {seed: size}, "mean": float, "std": float, "num_seeds": int}``; ``std`` is the population
    standard deviation (ddof=0), so a single seed gives 0.0 rather than NaN.
    """
    if not isinstance(pruned_by_seed, Mapping) or len(pruned_by_seed) == 0:
        raise EffectiveSizeError(
            "pruned_by_seed is empty (or not a mapping); pass {seed: {sparsity: {case: accuracy}}}"
        )
    per_seed: dict[Hashable, float] = {}
    for seed, table in pruned_by_seed.items():
        try:
            per_seed[seed] = effective_size(full_accuracy, table, cases=cases, margin=margin)
        except EffectiveSizeError as exc:
            raise EffectiveSizeError(f"seed {seed!r}: {exc}") from exc
    values = list(per_seed.values())
    return {
        "per_seed": per_seed,
        "mean": statistics.fmean(values),
        "std": statistics.pstdev(values),
        "num_seeds": len(values),
    }
