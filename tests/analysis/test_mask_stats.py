"""Tests for hf_heuristic_core.analysis.mask_stats: hand-computed masks, error paths, control-mask invariants."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch

from hf_heuristic_core.errors import MaskShapeError, PruningError
from hf_heuristic_core.analysis.mask_stats import (
    CoreResult,
    MaskStatsError,
    core,
    head_frequency,
    inverse,
    iomin,
    iou,
    joint_frequency,
    mlp_frequency,
    random_from_complement,
    random_like,
    realized_sparsity,
    spearman,
    unit_frequency,
)

# Three head masks, 2 layers x 3 heads ("set A").
A1 = [[1, 1, 0], [0, 1, 1]]
A2 = [[1, 0, 1], [0, 1, 0]]
A3 = [[1, 1, 0], [1, 1, 0]]
SET_A = [A1, A2, A3]
# Two head masks of the same model ("set B").
B1 = [[1, 0, 0], [0, 1, 1]]
B2 = [[1, 1, 0], [0, 1, 0]]
SET_B = [B1, B2]


# ---------------------------------------------------------------------------------------------------- frequencies


def test_head_frequency_hand_computed() -> None:
    # Column-wise sums of A1 + A2 + A3:
    # layer 0: [1+1+1, 1+0+1, 0+1+0] = [3, 2, 1]; layer 1: [0+0+1, 1+1+1, 1+0+0] = [1, 3, 1]
    freq = head_frequency(SET_A)
    assert freq.dtype == torch.int64
    assert freq.tolist() == [[3, 2, 1], [1, 3, 1]]


def test_frequency_accepts_tensors_numpy_bool_and_stacked() -> None:
    expected = [[3, 2, 1], [1, 3, 1]]
    as_tensors = [torch.tensor(m, dtype=torch.float32) for m in SET_A]
    as_bool = [torch.tensor(m, dtype=torch.bool) for m in SET_A]
    stacked_np = np.array(SET_A, dtype=np.int8)
    stacked_t = torch.tensor(SET_A)
    for masks in (as_tensors, as_bool, stacked_np, stacked_t, tuple(SET_A)):
        assert unit_frequency(masks).tolist() == expected


def test_mlp_frequency_one_dim() -> None:
    # MLP masks [num_layers = 4]: sums per layer = [2, 0, 1, 3]
    masks = [[1, 0, 0, 1], [1, 0, 1, 1], [0, 0, 0, 1]]
    assert mlp_frequency(masks).tolist() == [2, 0, 1, 3]
    # a 2-D array is a stack of 1-D masks
    assert mlp_frequency(np.array(masks)).tolist() == [2, 0, 1, 3]


def test_joint_frequency_hand_computed() -> None:
    # freq A = [[3, 2, 1], [1, 3, 1]], freq B = B1 + B2 = [[2, 1, 0], [0, 2, 1]]
    # (fA, fB) per unit: (3,2) (2,1) (1,0) | (1,0) (3,2) (1,1)
    # -> (3,2): 2, (2,1): 1, (1,0): 2, (1,1): 1; shape (3+1, 2+1)
    expected = [
        [0, 0, 0],  # i = 0
        [2, 1, 0],  # i = 1
        [0, 1, 0],  # i = 2
        [0, 0, 2],  # i = 3
    ]
    joint = joint_frequency(SET_A, SET_B)
    assert joint.dtype == torch.int64
    assert joint.tolist() == expected
    assert int(joint.sum()) == 6  # number of units


def test_joint_frequency_one_dim_and_sum() -> None:
    a = [[1, 0, 1], [1, 1, 0]]  # freq [2, 1, 1]
    b = [[0, 0, 1]]  # freq [0, 0, 1]
    # pairs (2,0) (1,0) (1,1)
    assert joint_frequency(a, b).tolist() == [[0, 0], [1, 1], [1, 0]]


def test_joint_frequency_shape_mismatch() -> None:
    with pytest.raises(MaskShapeError, match=r"masks_a\[0\] has shape \(2, 3\) but masks_b\[0\] has shape \(3,\)"):
        joint_frequency(SET_A, [[1, 0, 1]])


# ---------------------------------------------------------------------------------------------------- core


def test_core_hand_computed() -> None:
    # kept by all of A1, A2, A3: (0, 0) and (1, 1)
    # realized sparsity: zeros 2 + 3 + 2 = 7 of 18 -> chance = 6 * (11/18) ** 3
    result = core(SET_A)
    assert isinstance(result, CoreResult)
    assert result.units == [(0, 0), (1, 1)]
    assert result.size == 2
    assert result.num_units == 6 and result.num_masks == 3
    assert result.sparsity == pytest.approx(7 / 18)
    assert result.chance_size == pytest.approx(6 * (11 / 18) ** 3)
    assert result.mask.tolist() == [[1, 0, 0], [0, 1, 0]]


def test_core_explicit_sparsity_and_mlp_units() -> None:
    result = core([[1, 0, 1, 1], [1, 1, 0, 1]], sparsity=0.5)
    # 1-D masks: units are (layer,) tuples
    assert result.units == [(0,), (3,)]
    assert result.chance_size == pytest.approx(4 * 0.5**2)


def test_core_paper_chance_size() -> None:
    # The paper: N = 144 heads, s = 0.7, k = 12 masks -> 144 * 0.3 ** 12 = 7.65e-5 (quoted as 7.7e-5)
    base = torch.zeros(12, 12, dtype=torch.int64)
    base[:, :4] = 1  # 48 of 144 kept, realized sparsity 2/3
    masks = [random_like(base, generator=seed) for seed in range(12)]
    result = core(masks, sparsity=0.7)
    assert result.chance_size == pytest.approx(144 * 0.3**12)
    assert f"{result.chance_size:.1e}" == "7.7e-05"
    assert core(masks).sparsity == pytest.approx(2 / 3)


def test_core_rejects_percent_sparsity() -> None:
    with pytest.raises(MaskStatsError, match=r"pass fractions, e.g. 0.7 for 70%"):
        core(SET_A, sparsity=70)
    with pytest.raises(MaskStatsError, match=r"fraction in \[0, 1\]"):
        core(SET_A, sparsity=-0.1)


def test_core_sparsity_goes_through_the_shared_fraction_check() -> None:
    # check_sparsity(allow_one=True, error=MaskStatsError): 1.0 is a valid sparsity, booleans and strings are not.
    assert core(SET_A, sparsity=1.0).chance_size == 0.0
    assert core(SET_A, sparsity=np.float32(0.5)).chance_size == pytest.approx(6 * 0.5**3)
    with pytest.raises(MaskStatsError, match=r"sparsity must be a number, a fraction such as 0.5, got True"):
        core(SET_A, sparsity=True)
    with pytest.raises(MaskStatsError, match=r"sparsity must be a fraction in \[0, 1\], got nan"):
        core(SET_A, sparsity=float("nan"))


def test_realized_sparsity() -> None:
    assert realized_sparsity(A2) == pytest.approx(0.5)
    assert realized_sparsity([1, 1, 1, 0]) == pytest.approx(0.25)


# ---------------------------------------------------------------------------------------------------- validation


def test_non_binary_value_is_named() -> None:
    with pytest.raises(MaskStatsError, match=r"masks\[1\] must hold only 0 and 1 but has 0.5 at index \(1, 2\)"):
        unit_frequency([A1, [[1, 0, 1], [0, 1, 0.5]]])
    with pytest.raises(MaskStatsError, match=r"has 2 at index \(0,\)"):
        inverse([2, 0, 1])
    with pytest.raises(MaskStatsError, match=r"has nan"):
        iou([float("nan"), 1.0], [1, 1])


def test_shape_mismatch_names_index() -> None:
    with pytest.raises(MaskShapeError, match=r"masks\[2\] has shape \(2, 2\) but masks\[0\] has shape \(2, 3\)"):
        head_frequency([A1, A2, [[1, 0], [0, 1]]])


def test_ragged_and_non_numeric_masks() -> None:
    with pytest.raises(MaskShapeError, match=r"rectangular"):
        inverse([[1, 0], [1]])
    with pytest.raises(MaskShapeError, match=r"non-numeric"):
        inverse([1, None])


def test_empty_inputs() -> None:
    with pytest.raises(MaskStatsError, match=r"masks is empty"):
        unit_frequency([])
    with pytest.raises(MaskStatsError, match=r"masks is empty"):
        core(torch.zeros(0, 3))
    with pytest.raises(MaskShapeError, match=r"scalar"):
        inverse(torch.tensor(1))
    with pytest.raises(MaskShapeError, match=r"no units"):
        inverse([])
    with pytest.raises(MaskShapeError, match=r"stacked mask set needs shape"):
        unit_frequency(np.array([1, 0, 1]))
    with pytest.raises(TypeError, match=r"sequence of masks"):
        unit_frequency(5)


def test_errors_are_value_errors_and_pruning_errors() -> None:
    with pytest.raises(ValueError):
        unit_frequency([])
    with pytest.raises(PruningError):
        iou([1, 0], [1, 0, 1])


# ---------------------------------------------------------------------------------------------------- spearman


def test_spearman_hand_example_with_ties() -> None:
    # x = [1, 2, 2, 3] -> average ranks [1, 2.5, 2.5, 4]; y = [1, 3, 2, 4] -> ranks [1, 3, 2, 4]
    # centred: dx = [-1.5, 0, 0, 1.5], dy = [-1.5, 0.5, -0.5, 1.5]
    # sum dx*dy = 4.5, sum dx^2 = 4.5, sum dy^2 = 5 -> rho = 4.5 / sqrt(22.5) = sqrt(0.9)
    # t = rho * sqrt(2 / 0.1) = sqrt(18); for 2 d.o.f. the two-sided p = 1 - t / sqrt(t^2 + 2) = 1 - sqrt(0.9)
    rho, p = spearman([1, 2, 2, 3], [1, 3, 2, 4])
    assert rho == pytest.approx(math.sqrt(0.9), abs=1e-12)
    assert p == pytest.approx(1 - math.sqrt(0.9), abs=1e-12)
    ref = scipy.stats.spearmanr([1, 2, 2, 3], [1, 3, 2, 4])
    assert rho == pytest.approx(ref.statistic) and p == pytest.approx(ref.pvalue)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_spearman_matches_scipy_on_random_frequencies(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 13, size=(12, 12))  # head frequencies out of 12 seeds: many ties
    b = np.clip(a + rng.integers(-3, 4, size=(12, 12)), 0, 12)
    rho, p = spearman(torch.from_numpy(a), b)
    ref = scipy.stats.spearmanr(a.ravel(), b.ravel())
    assert rho == pytest.approx(ref.statistic, rel=1e-12)
    assert p == pytest.approx(ref.pvalue, rel=1e-9)


@pytest.mark.parametrize(
    "a, b",
    [
        ([1, 2, 2, 3], [1, 3, 2, 4]),
        ([3, 2, 1, 0, 2, 1, 2, 1], [3, 1, 0, 0, 1, 0, 1, 0]),        # the report test's head frequencies
        ([0.5, 0.25, 0.25, 1.0, 0.0], [1, 2, 3, 4, 5]),
        ([[12, 0, 3], [3, 7, 12]], [[11, 1, 3], [2, 7, 12]]),            # 2-D frequencies are flattened
    ],
)
def test_spearman_is_scipys_spearmanr(a, b) -> None:
    ref = scipy.stats.spearmanr(np.ravel(a), np.ravel(b))
    rho, p = spearman(a, b)
    assert (rho, p) == (float(ref.statistic), float(ref.pvalue))
    assert type(rho) is float and type(p) is float


def test_spearman_perfect_and_anti() -> None:
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == (1.0, 0.0)
    rho, p = spearman([1, 2, 3, 4], [4, 3, 2, 1])
    assert rho == -1.0 and p == 0.0


def test_spearman_errors() -> None:
    with pytest.raises(MaskShapeError, match=r"freq_a has shape \(3,\) but freq_b has shape \(4,\)"):
        spearman([1, 2, 3], [1, 2, 3, 4])
    with pytest.raises(MaskStatsError, match=r"freq_b is constant .* undefined"):
        spearman([1, 2, 3], [5, 5, 5])
    with pytest.raises(MaskStatsError, match=r"at least 3"):
        spearman([1, 2], [2, 1])
    with pytest.raises(MaskStatsError, match=r"non-finite"):
        spearman([1, float("inf"), 3], [1, 2, 3])


# ---------------------------------------------------------------------------------------------------- overlap


def test_iou_iomin_hand_computed() -> None:
    # A1 = [[1,1,0],[0,1,1]], A2 = [[1,0,1],[0,1,0]]
    # intersection [[1,0,0],[0,1,0]] -> 2; |A1| = 4, |A2| = 3, union = 5
    assert iou(A1, A2) == pytest.approx(2 / 5)
    assert iomin(A1, A2) == pytest.approx(2 / 3)
    # layer 0: inter 1, |A| 2, |B| 2, union 3; layer 1: inter 1, |A| 2, |B| 1, union 2
    per_layer_iou = iou(A1, A2, per_layer=True)
    assert per_layer_iou.dtype == torch.float64
    assert per_layer_iou.tolist() == pytest.approx([1 / 3, 1 / 2])
    assert iomin(A1, A2, per_layer=True).tolist() == pytest.approx([1 / 2, 1.0])


def test_iou_identical_and_disjoint() -> None:
    assert iou(A1, A1) == 1.0 and iomin(A1, A1) == 1.0
    assert iou(A1, inverse(A1)) == 0.0 and iomin(A1, inverse(A1)) == 0.0
    # subset: iomin = 1, iou = 2 / 4
    assert iomin([1, 1, 0, 0], [1, 1, 1, 1]) == 1.0
    assert iou([1, 1, 0, 0], [1, 1, 1, 1]) == 0.5


def test_overlap_zero_denominator_convention() -> None:
    # Both empty -> 1.0 (identical sets); one empty -> 0.0 (nothing shared).
    zeros, ones = [0, 0, 0], [1, 1, 1]
    assert iou(zeros, zeros) == 1.0 and iomin(zeros, zeros) == 1.0
    assert iou(zeros, ones) == 0.0 and iomin(zeros, ones) == 0.0
    a = [[0, 0], [1, 0], [0, 0]]
    b = [[0, 0], [0, 1], [1, 0]]
    # layer 0 both empty; layer 1 disjoint (union 2); layer 2 only b keeps a unit
    assert iou(a, b, per_layer=True).tolist() == [1.0, 0.0, 0.0]
    assert iomin(a, b, per_layer=True).tolist() == [1.0, 0.0, 0.0]


def test_overlap_one_dim_per_layer() -> None:
    # MLP masks: each layer is one unit
    assert iou([1, 0, 1], [1, 0, 0], per_layer=True).tolist() == [1.0, 1.0, 0.0]
    assert iou([1, 0, 1], [1, 0, 0]) == 0.5


def test_overlap_shape_mismatch() -> None:
    with pytest.raises(MaskShapeError, match=r"a has shape \(2, 3\) but b has shape \(3, 2\)"):
        iou(A1, [[1, 0], [0, 1], [1, 1]])


# ---------------------------------------------------------------------------------------------------- controls


def _layer_counts(mask: torch.Tensor) -> list[int]:
    return torch.as_tensor(mask).reshape(len(mask), -1).sum(dim=1).tolist()


MASK = torch.tensor(
    [
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 0],
        [0, 0, 0, 0, 0, 0],
        [1, 1, 1, 1, 1, 1],
    ]
)


def test_inverse() -> None:
    assert inverse(A1).tolist() == [[0, 0, 1], [1, 0, 0]]
    assert inverse(torch.tensor([True, False])).tolist() == [False, True]
    assert inverse(torch.tensor([True, False])).dtype == torch.bool
    assert inverse(torch.tensor([1.0, 0.0])).dtype == torch.float32


def test_random_like_preserves_per_layer_counts_and_is_deterministic() -> None:
    for seed in range(20):
        r = random_like(MASK, generator=seed)
        assert _layer_counts(r) == [2, 5, 0, 6]
        assert set(r.unique().tolist()) <= {0, 1}
    assert torch.equal(random_like(MASK, generator=7), random_like(MASK, generator=7))
    g1, g2 = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    assert torch.equal(random_like(MASK, g1), random_like(MASK, g2))
    # different seeds give different masks at least sometimes; every position of layer 0 is reachable
    draws = torch.stack([random_like(MASK, generator=s) for s in range(200)])
    assert len({tuple(d.flatten().tolist()) for d in draws}) > 1
    assert bool((draws[:, 0].sum(dim=0) > 0).all())


def test_random_like_dtype_and_global_count() -> None:
    r = random_like(MASK.bool(), generator=0)
    assert r.dtype == torch.bool
    mlp = torch.tensor([1, 0, 0, 1, 1, 0])
    assert torch.equal(random_like(mlp, generator=0), mlp)  # per layer: each layer is one unit
    draws = [random_like(mlp, generator=s, per_layer=False) for s in range(50)]
    assert all(int(d.sum()) == 3 for d in draws)
    assert any(not torch.equal(d, mlp) for d in draws)


def test_random_from_complement_default_counts() -> None:
    # kept per layer [2, 5, 0, 6], pruned per layer [4, 1, 6, 0] -> min = [2, 1, 0, 0]
    for seed in range(20):
        r = random_from_complement(MASK, generator=seed)
        assert _layer_counts(r) == [2, 1, 0, 0]
        assert int((r * MASK).sum()) == 0  # only pruned units
    assert torch.equal(random_from_complement(MASK, generator=5), random_from_complement(MASK, generator=5))


def test_random_from_complement_explicit_counts() -> None:
    r = random_from_complement(MASK, num_keep=[4, 0, 3, 0], generator=1)
    assert _layer_counts(r) == [4, 0, 3, 0]
    assert int((r * MASK).sum()) == 0
    # an int is a total drawn from the whole complement (11 free units)
    r = random_from_complement(MASK, num_keep=11, generator=1)
    assert torch.equal(r, inverse(MASK))
    r = random_from_complement(MASK, num_keep=5, generator=1)
    assert int(r.sum()) == 5 and int((r * MASK).sum()) == 0
    # global default: min(13 kept, 11 pruned) = 11
    assert int(random_from_complement(MASK, generator=0, per_layer=False).sum()) == 11


def test_random_from_complement_mlp() -> None:
    mlp = [1, 1, 0, 0, 0]
    assert random_from_complement(mlp, generator=0).tolist() == [0, 0, 0, 0, 0]  # per-layer cap is 0
    r = random_from_complement(mlp, generator=0, per_layer=False)
    assert int(r.sum()) == 2 and r[:2].tolist() == [0, 0]


def test_random_from_complement_errors() -> None:
    with pytest.raises(MaskStatsError, match=r"asks for 2 units in layer 1 but the complement of mask has only 1"):
        random_from_complement(MASK, num_keep=[0, 2, 0, 0])
    with pytest.raises(MaskStatsError, match=r"asks for 12 units in the whole mask .* only 11"):
        random_from_complement(MASK, num_keep=12)
    with pytest.raises(MaskShapeError, match=r"one count per layer \(length 4\)"):
        random_from_complement(MASK, num_keep=[1, 1])
    with pytest.raises(MaskStatsError, match=r"non-negative"):
        random_from_complement(MASK, num_keep=[-1, 0, 0, 0])
    with pytest.raises(TypeError, match=r"int seed"):
        random_like(MASK, generator="seed")


# Layer 0 keeps all 4 units (its complement is empty), layer 1 keeps 1 of 4, layer 2 none, layer 3 keeps 2 of 4:
# kept 7, pruned 9. Per-layer caps give [0, 1, 0, 2] = 3 units; the other 4 come from the rest of the complement
# (layer 1: 2 left, layer 2: 4 left).
SPILL = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0]])


def test_random_from_complement_redistribute_hand_counts() -> None:
    seen = set()
    dropped = torch.zeros(4, 4, dtype=torch.int64)
    for seed in range(600):
        r = random_from_complement(SPILL, generator=seed, redistribute=True)
        counts = _layer_counts(r)
        assert int(r.sum()) == 7 and int((r * SPILL).sum()) == 0
        assert counts[0] == 0 and counts[3] == 2 and 1 <= counts[1] <= 3 and counts[1] + counts[2] == 5
        seen.add(tuple(counts))
        dropped += (1 - SPILL) * (1 - r)
    assert seen == {(0, 1, 4, 2), (0, 2, 3, 2), (0, 3, 2, 2)}
    # Layer 3's two free units are always taken (its cap). Layer 1's cap takes 1 of its 3 free units; the 4 spilled
    # units are then drawn uniformly from the 6 free units left (2 in layer 1, 4 in layer 2), leaving 2 out. A free
    # unit of layer 1 is left out with probability 2/3 * 2/6 = 2/9 (133 of 600 draws), one of layer 2 with 2/6
    # (200 of 600).
    assert dropped[3].tolist() == [0, 0, 0, 0] and dropped[0].tolist() == [0, 0, 0, 0]
    assert int(dropped[1, 1:].sum() + dropped[2].sum()) == 600 * 2
    assert bool(((dropped[1, 1:] > 100) & (dropped[1, 1:] < 167)).all()), dropped.tolist()
    assert bool(((dropped[2] > 165) & (dropped[2] < 235)).all()), dropped.tolist()


def test_random_from_complement_redistribute_exact_cases() -> None:
    # Kept 6 = pruned 6: the only way to match is the whole complement.
    half = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0], [0, 0, 0, 0]])
    assert torch.equal(random_from_complement(half, generator=0, redistribute=True), inverse(half))
    # Kept 13 > pruned 11 (MASK): the whole complement, 11 units.
    assert torch.equal(random_from_complement(MASK, generator=0, redistribute=True), inverse(MASK))
    # No layer overflows: the same draw as the per-layer default, seed for seed.
    roomy = torch.tensor([[1, 1, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]])
    for seed in range(10):
        assert torch.equal(random_from_complement(roomy, generator=seed, redistribute=True),
                           random_from_complement(roomy, generator=seed))
    # 1-D (MLP) masks: the same draw as per_layer=False.
    mlp = torch.tensor([1, 1, 0, 0, 0])
    for seed in range(10):
        assert torch.equal(random_from_complement(mlp, generator=seed, redistribute=True),
                           random_from_complement(mlp, generator=seed, per_layer=False))
    assert random_from_complement(MASK.bool(), generator=0, redistribute=True).dtype == torch.bool


def test_random_from_complement_redistribute_needs_default_counts() -> None:
    with pytest.raises(MaskStatsError, match=r"redistribute=True spreads the default counts .* pass num_keep=None"):
        random_from_complement(MASK, num_keep=3, redistribute=True)
