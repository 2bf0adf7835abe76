"""`effective_sizes_by_scan`: exact early stopping gives `effective_size`'s answer on hand-made tables (monotone and
not), asks for each (level, case) at most once, shares evaluations between overlapping groups, and evaluates exactly
the pairs a hand scan needs."""

from __future__ import annotations

import random

import pytest

from hf_heuristic_core.evaluation.effective_size import (
    EffectiveSizeError,
    effective_size,
    effective_sizes_by_scan,
)

# Dyadic numbers: exact in binary floating point, so the strict boundary is exact too.
FULL = {"id": 0.875, "o1": 0.25, "o2": 0.5}
GROUPS = {"ID": ["id"], "OOD": ["o1", "o2"], "mixed": ["id", "o1", "o2"]}
LEVELS = [0.1, 0.3, 0.5, 0.7]
# margin 0.125: thresholds ID 0.75, OOD 0.25, mixed 0.5417 - 0.125 = 0.4167 (means over the group's cases)
TABLE = {
    #          id      o1      o2         ID mean      OOD mean   mixed mean
    0.7: {"id": 0.5, "o1": 0.0, "o2": 0.25},   # 0.5 no       0.125 no   0.25 no
    0.5: {"id": 0.75, "o1": 0.25, "o2": 0.5},  # 0.75 no (strict)  0.375 yes  0.5 yes
    0.3: {"id": 0.5, "o1": 0.0, "o2": 0.0},    # 0.5 no       0.0 no     0.1667 no   <- unfaithful below faithful ones
    0.1: {"id": 0.875, "o1": 0.25, "o2": 0.5}, # 0.875 yes    0.375 yes  0.5417 yes
}


class Recorder:
    """An `evaluate` callback over a fixed table that records every (level, case) it was asked for."""

    def __init__(self, table):
        self.table, self.asked = table, []

    def __call__(self, level, cases):
        self.asked.extend((level, case) for case in cases)
        return {case: self.table[level][case] for case in cases}


def test_scan_equals_the_definition_on_a_non_monotone_table_and_asks_only_what_it_needs():
    evaluate = Recorder(TABLE)
    sizes, table = effective_sizes_by_scan(FULL, LEVELS, GROUPS, evaluate, margin=0.125)
    for group, cases in GROUPS.items():
        assert sizes[group] == effective_size(FULL, TABLE, cases=cases, margin=0.125)
    assert sizes == {"ID": pytest.approx(0.9), "OOD": 0.5, "mixed": 0.5}
    # By hand: ID scans 0.7, 0.5, 0.3, 0.1 on "id"; OOD stops at 0.5 after 0.7 on o1, o2; mixed (also 0.5) needs
    # every set at 0.7 and 0.5, all of which ID and OOD already asked for: it costs no evaluation of its own.
    expected = {(level, "id") for level in LEVELS} | {(level, o) for level in (0.7, 0.5) for o in ("o1", "o2")}
    assert len(evaluate.asked) == len(set(evaluate.asked)) == len(expected)   # each pair once
    assert set(evaluate.asked) == expected
    assert evaluate.asked == [(0.7, "id"), (0.5, "id"), (0.3, "id"), (0.1, "id"), (0.7, "o1"), (0.7, "o2"),
                              (0.5, "o1"), (0.5, "o2")]   # 8 of the 12 a full evaluation runs
    assert table == {level: {c: TABLE[level][c] for c in row} for level, row in table.items()}


def test_without_the_mixed_group_the_scan_skips_levels_below_each_groups_first_faithful_one():
    evaluate = Recorder(TABLE)
    sizes, table = effective_sizes_by_scan(FULL, LEVELS, {"OOD": ["o1", "o2"]}, evaluate, margin=0.125)
    assert sizes == {"OOD": 0.5}
    assert evaluate.asked == [(0.7, "o1"), (0.7, "o2"), (0.5, "o1"), (0.5, "o2")]   # 4 of 12 evaluations
    assert set(table) == {0.7, 0.5}


def test_a_level_is_decided_as_soon_as_the_missing_sets_cannot_change_it():
    full = {"big": 1.0, "s1": 0.5, "s2": 0.5, "s3": 0.5}            # mean 0.625, threshold 0.5 at margin 0.125
    table = {0.6: {"big": 1.0, "s1": 0.0, "s2": 0.0, "s3": 0.0},    # mean 0.25: unfaithful
             0.4: {"big": 0.0, "s1": 1.0, "s2": 1.0, "s3": 1.0},    # mean 0.75: faithful
             0.2: {"big": 1.0, "s1": 1.0, "s2": 1.0, "s3": 1.0}}
    evaluate = Recorder(table)
    sizes, _ = effective_sizes_by_scan(full, [0.2, 0.4, 0.6], {"all": list(full)}, evaluate, margin=0.125,
                                       costs={"big": 500, "s1": 64, "s2": 64, "s3": 64})
    assert sizes == {"all": effective_size(full, table, margin=0.125)} == {"all": pytest.approx(0.6)}
    # Smallest sets first. 0.6: after s1 = s2 = 0 the mean could still reach (0 + 0 + 1 + 1) / 4 = 0.5, exactly the
    # threshold (a tie is left to the exact arithmetic), so s3 runs; then it is at most 0.25: unfaithful, and the
    # big set is never evaluated. 0.4: after s1 = s2 = s3 = 1 the mean is at least 0.75: faithful without "big".
    assert evaluate.asked == [(0.6, "s1"), (0.6, "s2"), (0.6, "s3"), (0.4, "s1"), (0.4, "s2"), (0.4, "s3")]


def test_accuracies_outside_zero_one_are_refused():
    with pytest.raises(EffectiveSizeError, match=r"accuracies are fractions in \[0, 1\]"):
        effective_sizes_by_scan(FULL, LEVELS, {"ID": ["id"]}, lambda level, cases: {"id": 87.5})


def test_nothing_faithful_scans_everything_and_gives_one():
    table = {level: {"id": 0.0, "o1": 0.0, "o2": 0.0} for level in LEVELS}
    evaluate = Recorder(table)
    sizes, _ = effective_sizes_by_scan(FULL, LEVELS, GROUPS, evaluate, margin=0.125)
    assert sizes == {"ID": 1.0, "OOD": 1.0, "mixed": 1.0}
    assert len(evaluate.asked) == len(LEVELS) * 3


def test_a_prefilled_table_is_scored_without_any_evaluation():
    def never(level, cases):
        raise AssertionError("nothing should be evaluated")
    sizes, _ = effective_sizes_by_scan(FULL, LEVELS, GROUPS, never, margin=0.125,
                                       table={k: dict(v) for k, v in TABLE.items()})
    assert sizes == {g: effective_size(FULL, TABLE, cases=c, margin=0.125) for g, c in GROUPS.items()}


def test_random_tables_monotone_or_not_give_the_definitions_answer():
    for trial in range(300):
        rng = random.Random(trial)
        cases = [f"c{i}" for i in range(rng.randint(1, 6))]
        full = {c: rng.randint(0, 16) / 16 for c in cases}
        levels = sorted(rng.sample([i / 20 for i in range(20)], rng.randint(1, 8)))
        table = {level: {c: rng.randint(0, 16) / 16 for c in cases} for level in levels}
        groups = {f"g{i}": rng.sample(cases, rng.randint(1, len(cases))) for i in range(rng.randint(1, 4))}
        margin = rng.choice([0.0, 0.0625, 0.125, 0.25])
        evaluate = Recorder(table)
        sizes, _ = effective_sizes_by_scan(full, levels, groups, evaluate, margin=margin)
        assert sizes == {g: effective_size(full, table, cases=c, margin=margin) for g, c in groups.items()}, trial
        assert len(evaluate.asked) == len(set(evaluate.asked)) <= len(levels) * len(cases)


def test_an_evaluator_that_drops_a_case_is_a_clear_error():
    with pytest.raises(EffectiveSizeError, match="returned no accuracy for case 'o2'"):
        effective_sizes_by_scan(FULL, LEVELS, {"OOD": ["o1", "o2"]}, lambda level, cases: {"o1": 0.0})
    with pytest.raises(EffectiveSizeError, match="groups is empty"):
        effective_sizes_by_scan(FULL, LEVELS, {}, Recorder(TABLE))
    with pytest.raises(EffectiveSizeError, match="not in full_accuracy"):
        effective_sizes_by_scan(FULL, LEVELS, {"X": ["nope"]}, Recorder(TABLE))
