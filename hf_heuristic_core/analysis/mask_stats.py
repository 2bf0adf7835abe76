"""Statistics over binary unit masks: frequencies, the heuristic core, overlap, rank correlation, controls.

These are the analyses of *The Heuristic Core* (Bhaskar, Friedman, Chen), section 4, and the overlap and control
measures of the weight-mask papers, written as pure functions so they run on saved mask artifacts without a model.

Conventions
-----------
* A mask holds one bit per unit, ``1`` = kept, ``0`` = pruned. Head masks are ``[num_layers, num_heads]``, MLP masks
  ``[num_layers]``; every function accepts any shape with at least one dimension, and "per layer" always means
  "grouped along dim 0".
* Masks may be torch tensors (any dtype, including bool), numpy arrays or nested lists.
* A *set* of masks is either a sequence of masks (``[mask_seed42, mask_seed43, ...]``) or one tensor / array whose
  first dimension indexes the masks (``stacked[k] == mask_k``). A nested list is read as a sequence of masks.
* Counts are returned as ``torch.int64`` CPU tensors, ratios as Python floats (or float64 tensors per layer).
* Functions that *return masks* (:func:`inverse`, :func:`random_like`, :func:`random_from_complement`) return a
  tensor with the input's dtype and device when the input is a torch tensor, ``torch.int64`` otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence, Union

import numpy as np
import torch

from ..errors import MaskShapeError, PruningError
from ..relaxations.binarize import check_sparsity

__all__ = [
    "MaskStatsError", "CoreResult", "realized_sparsity", "unit_frequency", "head_frequency", "mlp_frequency",
    "joint_frequency", "core", "spearman", "iou", "iomin", "random_like", "random_from_complement", "inverse",
]

MaskLike = Union[torch.Tensor, np.ndarray, Sequence[Any]]
GeneratorLike = Union[torch.Generator, int, None]


class MaskStatsError(PruningError, ValueError):
    """A mask holds a value other than 0/1, a mask set is empty, or a statistic is undefined for its input."""


# --------------------------------------------------------------------------------------------------------------------
# Input handling
# --------------------------------------------------------------------------------------------------------------------


def _to_tensor(x: MaskLike, what: str) -> torch.Tensor:
    """Convert any array-like to a CPU tensor, so every statistic runs on one representation."""
    if isinstance(x, torch.Tensor):
        return x.detach().cpu()
    try:
        arr = np.asarray(x)
        if arr.dtype == object:
            raise TypeError("it holds non-numeric entries")
        return torch.as_tensor(arr)
    except (ValueError, TypeError) as exc:
        raise MaskShapeError(
            f"{what} could not be read as a rectangular array ({exc}); "
            "pass a tensor, numpy array or nested list with equal-length rows"
        ) from exc


def _check_binary(t: torch.Tensor, what: str) -> torch.Tensor:
    """Return `t` as int64 0/1, naming the first bad value: a soft or thresholded-wrong mask must not pass silently."""
    if t.dtype == torch.bool:
        return t.to(torch.int64)
    if t.is_complex():
        raise MaskStatsError(f"{what} is complex; masks must hold only 0 and 1")
    bad = ~((t == 0) | (t == 1))
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        value = t[idx].item()
        raise MaskStatsError(
            f"{what} must hold only 0 and 1 but has {value!r} at index {idx}; "
            "binarize soft masks first (e.g. `(mask > 0.5)`)"
        )
    return t.to(torch.int64)


def _as_mask(mask: MaskLike, what: str = "mask") -> torch.Tensor:
    """Validate one mask and return it as an int64 0/1 CPU tensor."""
    t = _to_tensor(mask, what)
    if t.dim() == 0:
        raise MaskShapeError(
            f"{what} is a scalar; a mask needs at least one dimension ([num_layers] or [num_layers, num_heads])"
        )
    if t.numel() == 0:
        raise MaskShapeError(f"{what} has shape {tuple(t.shape)} and no units; pass a non-empty mask")
    return _check_binary(t, what)


def _as_mask_set(masks: MaskLike, what: str = "masks") -> torch.Tensor:
    """Validate a set of masks and stack it to ``[num_masks, *mask_shape]``."""
    if isinstance(masks, (torch.Tensor, np.ndarray)):
        stacked = _to_tensor(masks, what)
        if stacked.dim() < 2:
            raise MaskShapeError(
                f"{what} has shape {tuple(stacked.shape)}; a stacked mask set needs shape [num_masks, *mask_shape] "
                "(wrap a single mask in a list: [mask])"
            )
        if stacked.shape[0] == 0:
            raise MaskStatsError(f"{what} is empty; pass at least one mask")
        if stacked[0].numel() == 0:
            raise MaskShapeError(f"{what} has masks of shape {tuple(stacked.shape[1:])} with no units")
        return _check_binary(stacked, what)
    if isinstance(masks, (str, bytes)) or not isinstance(masks, Sequence):
        raise TypeError(f"{what} must be a sequence of masks or a stacked tensor/array, got {type(masks).__name__}")
    if len(masks) == 0:
        raise MaskStatsError(f"{what} is empty; pass at least one mask")
    converted = [_as_mask(m, f"{what}[{i}]") for i, m in enumerate(masks)]
    ref = converted[0].shape
    for i, m in enumerate(converted):
        if m.shape != ref:
            raise MaskShapeError(
                f"{what}[{i}] has shape {tuple(m.shape)} but {what}[0] has shape {tuple(ref)}; "
                "all masks in a set must have the same shape"
            )
    return torch.stack(converted)


def _check_same_shape(a: torch.Tensor, b: torch.Tensor, name_a: str, name_b: str) -> None:
    if a.shape != b.shape:
        raise MaskShapeError(
            f"{name_a} has shape {tuple(a.shape)} but {name_b} has shape {tuple(b.shape)}; "
            "compare masks of the same model"
        )


def _restore_type(result: torch.Tensor, original: MaskLike) -> torch.Tensor:
    """Give a produced mask the caller's dtype/device, so it can be fed back wherever the input came from."""
    if isinstance(original, torch.Tensor):
        return result.to(device=original.device, dtype=original.dtype)
    return result


def _make_generator(generator: GeneratorLike) -> torch.Generator | None:
    """Accept a seed for convenience; None means torch's global RNG (not reproducible unless seeded globally)."""
    if generator is None or isinstance(generator, torch.Generator):
        return generator
    if isinstance(generator, bool) or not isinstance(generator, (int, np.integer)):
        raise TypeError(f"generator must be a torch.Generator, an int seed or None, got {type(generator).__name__}")
    g = torch.Generator()
    g.manual_seed(int(generator))
    return g


def _per_layer_counts(mask: torch.Tensor) -> torch.Tensor:
    """Kept units per layer (dim 0) of an int64 mask."""
    return mask.reshape(mask.shape[0], -1).sum(dim=1)


# --------------------------------------------------------------------------------------------------------------------
# Frequencies and the core
# --------------------------------------------------------------------------------------------------------------------


def realized_sparsity(mask: MaskLike) -> float:
    """Fraction of pruned units (zeros), every unit counted once as in the paper."""
    m = _as_mask(mask)
    return 1.0 - float(m.sum()) / m.numel()


def unit_frequency(masks: MaskLike) -> torch.Tensor:
    """Number of masks that keep each unit; same shape as one mask, int64.

    Works for any mask shape (heads ``[L, H]``, MLPs ``[L]``); it is the paper's "head frequency".
    """
    return _as_mask_set(masks).sum(dim=0)


def head_frequency(masks: MaskLike) -> torch.Tensor:
    """:func:`unit_frequency` for head masks ``[num_layers, num_heads]`` (named for readability at call sites)."""
    return unit_frequency(masks)


def mlp_frequency(masks: MaskLike) -> torch.Tensor:
    """:func:`unit_frequency` for MLP masks ``[num_layers]`` (named for readability at call sites)."""
    return unit_frequency(masks)


def joint_frequency(masks_a: MaskLike, masks_b: MaskLike) -> torch.Tensor:
    """Joint histogram of unit frequencies under two mask sets (the paper's Figure 5 heatmap).

    Entry ``(i, j)`` is the number of units kept by exactly ``i`` masks of set A and exactly ``j`` masks of set B;
    the shape is ``(len(A) + 1, len(B) + 1)`` and the entries sum to the number of units.
    """
    a = _as_mask_set(masks_a, "masks_a")
    b = _as_mask_set(masks_b, "masks_b")
    _check_same_shape(a[0], b[0], "masks_a[0]", "masks_b[0]")
    fa = a.sum(dim=0).flatten()
    fb = b.sum(dim=0).flatten()
    out = torch.zeros(a.shape[0] + 1, b.shape[0] + 1, dtype=torch.int64)
    out.index_put_((fa, fb), torch.ones_like(fa), accumulate=True)
    return out


@dataclass(frozen=True)
class CoreResult:
    """The units kept by every mask of a set, with the size expected if masks were drawn independently at random.

    ``units`` holds index tuples into one mask: ``(layer, head)`` for head masks, ``(layer,)`` for MLP masks
    (always tuples, so code that unpacks them works for any shape). ``mask`` is the core as a 0/1 int64 mask.
    """

    units: list[tuple[int, ...]]
    size: int
    chance_size: float
    num_units: int
    num_masks: int
    sparsity: float
    mask: torch.Tensor = field(repr=False)


def core(masks: MaskLike, sparsity: float | None = None) -> CoreResult:
    """The heuristic core: units kept by *all* masks, and its chance size ``N * (1 - s) ** k``.

    ``N`` = units per mask, ``k`` = number of masks, ``s`` = ``sparsity`` (a fraction) or, if None, the mean realized
    sparsity (fraction of zeros) of the masks. The chance size is the expected core size if each of the ``k`` masks
    kept each unit independently with probability ``1 - s`` (paper: 144 * 0.3**12 = 7.7e-5).
    """
    stacked = _as_mask_set(masks)
    k = stacked.shape[0]
    n = stacked[0].numel()
    if sparsity is None:
        s = 1.0 - float(stacked.sum()) / (k * n)
    else:
        s = check_sparsity(sparsity, "sparsity", allow_one=True, error=MaskStatsError)
    core_mask = stacked.prod(dim=0)
    units = [tuple(int(i) for i in idx) for idx in core_mask.nonzero().tolist()]
    return CoreResult(
        units=units,
        size=len(units),
        chance_size=n * (1.0 - s) ** k,
        num_units=n,
        num_masks=k,
        sparsity=s,
        mask=core_mask,
    )


# --------------------------------------------------------------------------------------------------------------------
# Rank correlation
# --------------------------------------------------------------------------------------------------------------------


def spearman(freq_a: MaskLike, freq_b: MaskLike) -> tuple[float, float]:
    """Spearman's rho between two frequency vectors (flattened), with its two-sided p-value.

    `scipy.stats.spearmanr` computes both (average ranks for ties; the p-value from the t distribution with
    ``n - 2`` degrees of freedom). The checks before it turn what scipy would answer with NaN and a warning into an
    error that names the problem: shapes that differ, fewer than 3 values, a value that is not finite, or a
    constant input (rho is then 0/0).
    """
    from scipy.stats import spearmanr

    a = _to_tensor(freq_a, "freq_a")
    b = _to_tensor(freq_b, "freq_b")
    if a.shape != b.shape:
        raise MaskShapeError(
            f"freq_a has shape {tuple(a.shape)} but freq_b has shape {tuple(b.shape)}; "
            "correlate frequencies of the same units"
        )
    x = a.flatten().to(torch.float64).numpy()
    y = b.flatten().to(torch.float64).numpy()
    n = x.size
    if n < 3:
        raise MaskStatsError(f"spearman needs at least 3 paired values for a p-value, got {n}")
    for name, v in (("freq_a", x), ("freq_b", y)):
        if not np.all(np.isfinite(v)):
            raise MaskStatsError(f"{name} has non-finite values; frequencies must be finite numbers")
        if np.all(v == v[0]):
            raise MaskStatsError(
                f"{name} is constant (every value is {v[0]:g}); Spearman's rho is undefined for a constant input"
            )
    rho, p = spearmanr(x, y)
    return float(rho), float(p)


# --------------------------------------------------------------------------------------------------------------------
# Overlap
# --------------------------------------------------------------------------------------------------------------------


def _overlap_counts(a: MaskLike, b: MaskLike, per_layer: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """|A∩B|, |A|, |B| over kept units, whole-mask (0-dim) or per layer (1-D)."""
    ma = _as_mask(a, "a")
    mb = _as_mask(b, "b")
    _check_same_shape(ma, mb, "a", "b")
    if per_layer:
        flat_a = ma.reshape(ma.shape[0], -1)
        flat_b = mb.reshape(mb.shape[0], -1)
        return (flat_a * flat_b).sum(dim=1), flat_a.sum(dim=1), flat_b.sum(dim=1)
    return (ma * mb).sum(), ma.sum(), mb.sum()


def _ratio(num: torch.Tensor, den: torch.Tensor, both_empty: torch.Tensor, per_layer: bool) -> torch.Tensor | float:
    """num/den, with 0/0 set to 1.0 when both sets are empty (they agree) and to 0.0 otherwise (nothing shared)."""
    num = num.to(torch.float64)
    den = den.to(torch.float64)
    safe = torch.where(den > 0, num / den.clamp(min=1), torch.zeros_like(num))
    out = torch.where(both_empty, torch.ones_like(safe), safe)
    return out if per_layer else float(out)


def iou(a: MaskLike, b: MaskLike, per_layer: bool = False) -> torch.Tensor | float:
    """Intersection over union of the kept units, ``|A∩B| / |A∪B|``.

    Returns a float, or with ``per_layer=True`` a float64 tensor with one value per layer (dim 0).
    When both masks keep nothing (in the whole mask or in a layer) the value is 1.0: the two sets are identical.
    """
    inter, na, nb = _overlap_counts(a, b, per_layer)
    union = na + nb - inter
    return _ratio(inter, union, (na == 0) & (nb == 0), per_layer)


def iomin(a: MaskLike, b: MaskLike, per_layer: bool = False) -> torch.Tensor | float:
    """Intersection over the smaller set, ``|A∩B| / min(|A|, |B|)``: 1.0 when one kept set contains the other.

    Returns a float, or with ``per_layer=True`` a float64 tensor with one value per layer (dim 0).
    Zero denominator: 1.0 if both masks keep nothing (identical), 0.0 if only one does (the masks share no unit;
    this keeps an emptied layer from counting as full overlap when averaging per-layer values).
    """
    inter, na, nb = _overlap_counts(a, b, per_layer)
    return _ratio(inter, torch.minimum(na, nb), (na == 0) & (nb == 0), per_layer)


# --------------------------------------------------------------------------------------------------------------------
# Control masks
# --------------------------------------------------------------------------------------------------------------------


def _scatter_random(
    candidates: torch.Tensor, counts: torch.Tensor, generator: torch.Generator | None
) -> torch.Tensor:
    """Per row of a boolean ``[rows, units]`` candidate matrix, switch on ``counts[row]`` random candidates."""
    out = torch.zeros(candidates.shape, dtype=torch.int64)
    for row in range(candidates.shape[0]):
        k = int(counts[row])
        if k == 0:
            continue
        pool = candidates[row].nonzero().flatten()
        chosen = pool[torch.randperm(pool.numel(), generator=generator)[:k]]
        out[row, chosen] = 1
    return out


def random_like(mask: MaskLike, generator: GeneratorLike = None, *, per_layer: bool = True) -> torch.Tensor:
    """A random mask with the same number of kept units as ``mask`` in every layer (dim 0).

    The control for "is it *these* units or just this many per layer?". Uniform over all masks with those counts.
    With ``per_layer=False`` only the total count is preserved; use that for 1-D (MLP) masks, where each layer is a
    single unit and per-layer preservation would return ``mask`` unchanged. ``generator``: a torch.Generator, an
    int seed, or None for torch's global RNG.
    """
    m = _as_mask(mask)
    g = _make_generator(generator)
    rows = m.reshape(m.shape[0], -1) if per_layer else m.reshape(1, -1)
    counts = rows.sum(dim=1)
    out = _scatter_random(torch.ones_like(rows, dtype=torch.bool), counts, g)
    return _restore_type(out.reshape(m.shape), mask)


def random_from_complement(
    mask: MaskLike,
    num_keep: int | Sequence[int] | torch.Tensor | None = None,
    generator: GeneratorLike = None,
    *,
    per_layer: bool = True,
    redistribute: bool = False,
) -> torch.Tensor:
    """A random mask whose kept units all lie among the units ``mask`` prunes (a disjoint control subnetwork).

    ``num_keep``:

    * ``None`` (default): with ``per_layer=True``, layer ``i`` keeps ``min(kept_i, pruned_i)`` units, i.e. as many
      as ``mask`` keeps there, capped by the complement available in that layer; with ``per_layer=False``,
      ``min(total kept, total pruned)`` units are drawn from the whole complement. (For 1-D MLP masks use
      ``per_layer=False``: with one unit per layer the per-layer cap is always 0.)
    * an int: that many units in total, drawn uniformly from the whole complement (``per_layer`` is ignored).
    * a sequence / 1-D tensor of length ``num_layers``: that many units in each layer.

    ``redistribute=True`` (with ``num_keep=None``) makes the control as dense as ``mask`` wherever the complement
    allows: each layer first keeps ``min(kept_i, pruned_i)`` units as above, then the units that full layers could
    not place are drawn uniformly from the rest of the complement, in any layer. The result keeps exactly as many
    units as ``mask`` when ``mask`` prunes at least as many units as it keeps, and the whole complement otherwise
    (check the count). On a 1-D mask it equals ``per_layer=False``.

    Asking for more units than the complement holds raises. ``generator``: a torch.Generator, an int seed, or None
    for torch's global RNG.
    """
    m = _as_mask(mask)
    g = _make_generator(generator)
    layers = m.reshape(m.shape[0], -1)
    free = layers == 0
    if redistribute and num_keep is not None:
        raise MaskStatsError(
            "redistribute=True spreads the default counts (as many units as mask keeps); "
            "pass num_keep=None with it, or drop redistribute to draw exactly num_keep units"
        )
    if redistribute:
        kept = layers.sum(dim=1)
        out = _scatter_random(free, torch.minimum(kept, free.sum(dim=1)), g)
        leftover = (free & (out == 0)).reshape(1, -1)
        missing = int(kept.sum() - out.sum())
        out += _scatter_random(leftover, torch.tensor([min(missing, int(leftover.sum()))]), g).reshape(out.shape)
        return _restore_type(out.reshape(m.shape), mask)
    rows, counts, scope = _complement_counts(m, layers, free, num_keep, per_layer)
    _check_counts(counts, rows.sum(dim=1), scope)
    out = _scatter_random(rows, counts, g)
    return _restore_type(out.reshape(m.shape), mask)


def _complement_counts(m: torch.Tensor, layers: torch.Tensor, free: torch.Tensor, num_keep: Any, per_layer: bool
                       ) -> tuple[torch.Tensor, torch.Tensor, str]:
    """The rows to draw from (per layer, or the whole complement as one row), how many units each, and the scope's
    name for messages ("layer" or "the whole mask")."""
    scope = "layer"
    if num_keep is None and per_layer:
        rows, counts = free, torch.minimum(layers.sum(dim=1), free.sum(dim=1))
    elif num_keep is None:
        rows, scope = free.reshape(1, -1), "the whole mask"
        counts = torch.minimum(layers.sum(), free.sum()).reshape(1)
    elif isinstance(num_keep, (int, np.integer)) and not isinstance(num_keep, bool):
        rows, scope = free.reshape(1, -1), "the whole mask"
        counts = torch.tensor([int(num_keep)])
    else:
        counts = _to_tensor(num_keep, "num_keep")
        if counts.dim() != 1 or counts.shape[0] != m.shape[0]:
            raise MaskShapeError(
                f"num_keep has shape {tuple(counts.shape)}; pass an int (total) or one count per layer "
                f"(length {m.shape[0]})"
            )
        if counts.is_floating_point() and not bool((counts == counts.round()).all()):
            raise MaskStatsError(f"num_keep must hold whole numbers, got {counts.tolist()}")
        rows, counts = free, counts.to(torch.int64)
    return rows, counts, scope


def _check_counts(counts: torch.Tensor, available: torch.Tensor, scope: str) -> None:
    """Refuse negative counts and counts over what the complement holds."""
    for i in range(counts.shape[0]):
        if counts[i] < 0:
            raise MaskStatsError(f"num_keep must be non-negative, got {int(counts[i])}")
        if counts[i] > available[i]:
            where = f"layer {i}" if scope == "layer" else scope
            raise MaskStatsError(
                f"num_keep asks for {int(counts[i])} units in {where} but the complement of mask has only "
                f"{int(available[i])} there; lower num_keep"
            )


def inverse(mask: MaskLike) -> torch.Tensor:
    """``1 - mask``: the complement subnetwork (keeps exactly what ``mask`` prunes)."""
    m = _as_mask(mask)
    return _restore_type(1 - m, mask)
