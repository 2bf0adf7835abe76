"""Tests for hf_heuristic_core.evaluation.effective_size: hand-made tables, the strict boundary, errors, and the paper's data."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from hf_heuristic_core.evaluation.effective_size import EffectiveSizeError, effective_size, effective_size_per_seed
from hf_heuristic_core.errors import PruningError

# All numbers below are dyadic (exact in binary floating point), so equalities at the boundary are exact.
FULL = {"id": 0.75, "ood": 0.25}  # mean 0.5
NON_MONOTONE = {
    # sparsity: accuracies                 mean    vs threshold 0.5 - 0.25 = 0.25
    0.1: {"id": 0.5, "ood": 0.25},  #       0.375   faithful
    0.3: {"id": 0.0, "ood": 0.25},  #       0.125   not faithful
    0.5: {"id": 0.5, "ood": 0.0},  #        0.25    not faithful (equal, inequality is strict)
    0.6: {"id": 0.5, "ood": 0.125},  #      0.3125  faithful  <- highest faithful
    0.7: {"id": 0.0, "ood": 0.0},  #        0.0     not faithful
}


def test_non_monotone_takes_highest_faithful() -> None:
    # 0.3 and 0.5 are unfaithful but 0.6 is faithful: effective size = 1 - 0.6
    assert effective_size(FULL, NON_MONOTONE, margin=0.25) == pytest.approx(0.4)


def test_strict_inequality_boundary() -> None:
    full = {"x": 0.75}
    # threshold = 0.75 - 0.25 = 0.5 exactly
    assert effective_size(full, {0.5: {"x": 0.5}}, margin=0.25) == 1.0  # equal -> not faithful
    assert effective_size(full, {0.5: {"x": 0.5 + 2**-20}}, margin=0.25) == 0.5  # just above -> faithful
    # margin 0: matching the full model exactly is not enough
    assert effective_size(full, {0.25: {"x": 0.75}}, margin=0.0) == 1.0
    assert effective_size(full, {0.25: {"x": 0.875}}, margin=0.0) == 0.75  # beating it is faithful (one-sided)


def test_none_faithful_gives_one() -> None:
    table = {0.25: {"id": 0.0, "ood": 0.0}, 0.5: {"id": 0.125, "ood": 0.0}}
    assert effective_size(FULL, table, margin=0.25) == 1.0


def test_default_cases_are_all_full_cases() -> None:
    explicit = effective_size(FULL, NON_MONOTONE, cases=["id", "ood"], margin=0.25)
    assert effective_size(FULL, NON_MONOTONE, margin=0.25) == explicit


def test_case_subsets_select_groups() -> None:
    # ID only: full 0.75, threshold 0.5; faithful where id > 0.5: none (0.5 is not > 0.5)
    assert effective_size(FULL, NON_MONOTONE, cases=["id"], margin=0.25) == 1.0
    # OOD only: full 0.25, threshold 0.0; faithful where ood > 0: 0.1, 0.3, 0.6 -> 1 - 0.6
    assert effective_size(FULL, NON_MONOTONE, cases=["ood"], margin=0.25) == pytest.approx(0.4)
    # cases may be any iterable, and extra cases in the tables are ignored
    assert effective_size(FULL, NON_MONOTONE, cases=("ood",), margin=0.25) == pytest.approx(0.4)


def test_default_margin_is_three_points() -> None:
    full = {"a": 0.8}
    assert effective_size(full, {0.5: {"a": 0.78}, 0.7: {"a": 0.76}}) == pytest.approx(0.5)


def test_zero_sparsity_allowed() -> None:
    assert effective_size({"a": 0.5}, {0.0: {"a": 0.5}, 0.5: {"a": 0.0}}, margin=0.25) == 1.0 - 0.0


def test_numpy_scalars_accepted() -> None:
    full = {"a": np.float32(0.75)}
    assert effective_size(full, {np.float64(0.5): {"a": np.float32(0.625)}}, margin=0.25) == 0.5


# ------------------------------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        ({"full_accuracy": {}}, r"full_accuracy is empty"),
        ({"pruned_accuracy": {}}, r"pruned_accuracy is empty"),
        ({"cases": []}, r"cases is empty"),
        ({"cases": "id"}, r"not one string; wrap it: \['id'\]"),
        ({"cases": ["id", "id"]}, r"more than once"),
        ({"cases": ["hans"]}, r"case 'hans' is not in full_accuracy"),
        ({"pruned_accuracy": {0.5: {"id": 0.7}}}, r"pruned_accuracy\[0.5\] has no accuracy for case 'ood'"),
        (
            {"pruned_accuracy": {50: {"id": 0.7, "ood": 0.2}}},
            r"sparsity 50 must be a fraction in \[0, 1\), got 50 \(pass fractions, e.g. 0.5 for 50%\)",
        ),
        ({"pruned_accuracy": {1.0: {"id": 0.7, "ood": 0.2}}}, r"sparsity 1.0 must be a fraction in \[0, 1\)"),
        ({"pruned_accuracy": {-0.1: {"id": 0.7, "ood": 0.2}}}, r"must be a fraction in \[0, 1\)"),
        (
            {"pruned_accuracy": {"50": {"id": 0.7, "ood": 0.2}}},
            r"sparsity key '50' is not a number.*float\(key\) / 100",
        ),
        ({"pruned_accuracy": {0.5: {"id": float("nan"), "ood": 0.2}}}, r"pruned_accuracy\[0.5\]\['id'\] is nan"),
        ({"full_accuracy": {"id": float("inf"), "ood": 0.2}}, r"full_accuracy\['id'\] is inf.*finite"),
        ({"full_accuracy": {"id": None, "ood": 0.2}}, r"full_accuracy\['id'\] is None"),
        ({"margin": -0.01}, r"margin must be >= 0"),
        ({"margin": float("nan")}, r"margin must be a finite number"),
    ],
)
def test_errors(kwargs: dict, pattern: str) -> None:
    args = {"full_accuracy": FULL, "pruned_accuracy": NON_MONOTONE, "margin": 0.25}
    args.update(kwargs)
    with pytest.raises(EffectiveSizeError, match=pattern):
        effective_size(**args)


def test_error_types() -> None:
    assert issubclass(EffectiveSizeError, ValueError) and issubclass(EffectiveSizeError, PruningError)


# ------------------------------------------------------------------------------------------------ per seed


def test_per_seed_mean_and_std() -> None:
    by_seed = {
        42: {0.5: {"id": 0.75, "ood": 0.25}, 0.75: {"id": 0.0, "ood": 0.0}},  # 0.5 faithful -> 0.5
        43: {0.5: {"id": 0.75, "ood": 0.25}, 0.75: {"id": 0.5, "ood": 0.25}},  # 0.75 faithful -> 0.25
    }
    result = effective_size_per_seed(FULL, by_seed, margin=0.25)
    assert result["per_seed"] == {42: 0.5, 43: 0.25}
    assert result["mean"] == 0.375
    assert result["std"] == 0.125  # population std of [0.5, 0.25]
    assert result["num_seeds"] == 2
    single = effective_size_per_seed(FULL, {0: by_seed[42]}, margin=0.25)
    assert single["std"] == 0.0


def test_per_seed_errors_name_the_seed() -> None:
    with pytest.raises(EffectiveSizeError, match=r"pruned_by_seed is empty"):
        effective_size_per_seed(FULL, {})
    with pytest.raises(EffectiveSizeError, match=r"seed 7: sparsity 70 must be a fraction"):
        effective_size_per_seed(FULL, {7: {70: {"id": 0.5, "ood": 0.5}}})


# ------------------------------------------------------------------------------------------------ real data

DATA = Path(__file__).resolve().parents[3] / "shared" / "data" / "heuristic-core-eval"
ID_CASES = ["validation_matched", "validation_mismatched"]
OOD_CASES = [
    "lexical_overlap_ln_preposition",
    "lexical_overlap_ln_subject-object_swap",
    "constituent_cn_embedded_under_if",
    "constituent_cn_embedded_under_verb",
]


@pytest.fixture(scope="module")
def mnli() -> tuple[dict, dict]:
    """(full accuracy per step, {seed: {step: {sparsity fraction: {case: acc}}}}) from the released tables."""
    if not DATA.is_dir():
        pytest.skip(f"real accuracy tables not found at {DATA} (the shared data folder is absent)")
    full = json.loads((DATA / "mnli-acc_over_ft.json").read_text())
    grid = json.loads((DATA / "mnli-sparsity-grid-acc.json").read_text())
    # The files store accuracies as fractions (e.g. 0.833) and sparsity keys as percent strings ("5".."70").
    accs = [a for row in full.values() for a in row.values()]
    assert all(0.0 <= a <= 1.0 for a in accs), "expected fractional accuracies"
    pruned = {
        seed: {step: {int(pct) / 100: row for pct, row in by_sp.items()} for step, by_sp in by_step.items()}
        for seed, by_step in grid.items()
    }
    return full, pruned


def _size_at(mnli: tuple[dict, dict], step: str, cases: list[str] | None) -> dict:
    full, pruned = mnli
    return effective_size_per_seed(full[step], {seed: steps[step] for seed, steps in pruned.items()}, cases=cases)


def test_real_data_effective_size_rises_ood_not_id(mnli: tuple[dict, dict]) -> None:
    full, pruned = mnli
    steps = sorted(full, key=int)
    first, last = steps[0], steps[-1]
    assert set(OOD_CASES) | set(ID_CASES) == set(full[first])
    assert all(set(by_step) == set(full) for by_step in pruned.values())

    ood_first, ood_last = _size_at(mnli, first, OOD_CASES), _size_at(mnli, last, OOD_CASES)
    id_first, id_last = _size_at(mnli, first, ID_CASES), _size_at(mnli, last, ID_CASES)
    mix_first, mix_last = _size_at(mnli, first, None), _size_at(mnli, last, None)
    print(
        f"\nMNLI effective size (mean over {ood_first['num_seeds']} seeds), step {first} -> {last}:"
        f"\n  OOD   {ood_first['mean']:.4f} -> {ood_last['mean']:.4f}  per seed {ood_first['per_seed']} -> "
        f"{ood_last['per_seed']}"
        f"\n  ID    {id_first['mean']:.4f} -> {id_last['mean']:.4f}  per seed {id_first['per_seed']} -> "
        f"{id_last['per_seed']}"
        f"\n  mixed {mix_first['mean']:.4f} -> {mix_last['mean']:.4f}"
    )
    # The paper's finding: OOD effective size increases as the model generalizes ...
    assert ood_last["mean"] > ood_first["mean"]
    assert ood_last["mean"] - ood_first["mean"] > 0.3
    assert mix_last["mean"] > mix_first["mean"]
    # ... while the ID effective size stays roughly flat.
    assert abs(id_last["mean"] - id_first["mean"]) < 0.1
    # Regression values (computed independently from the JSON tables).
    assert ood_first["mean"] == pytest.approx(0.30)
    assert ood_last["mean"] == pytest.approx(0.7667, abs=1e-3)
    assert id_first["mean"] == pytest.approx(0.50)
    assert id_last["mean"] == pytest.approx(0.4833, abs=1e-3)
    assert all(math.isfinite(r["std"]) for r in (ood_first, ood_last, id_first, id_last))
