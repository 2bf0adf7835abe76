"""Head masks and head frequencies: the mask grid and the joint-frequency heatmap."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from ._base import (
    PathLike,
    _annotate,
    _finish,
    _matrix,
    _mpl,
    _new_figure,
    _to_numpy,
)

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure


def plot_mask_grid(
    mask_or_frequency: Any,
    title: str | None = None,
    num_masks: int | None = None,
    path: PathLike | None = None,
    *,
    mlp: Any = None,
) -> Figure:
    """Layers x heads grid of one head mask, or of how many masks keep each head.

    Layer 0 is the top row (matrix order), heads run left to right. A 0/1 input without
    ``num_masks`` is drawn as a kept/pruned mask; anything else (or any input with ``num_masks``) as a
    frequency map with the count written in every cell and a colorbar "kept by N of num_masks".
    ``mlp`` (a ``[num_layers]`` vector, 0/1 or counts) adds a separate column for the MLP blocks.
    """
    mpl = _mpl()
    data = _matrix(mask_or_frequency, "mask_or_frequency", nonnegative=True)
    num_layers, num_heads = data.shape
    mlp_col = _mlp_column(mlp, num_layers)
    values = data if mlp_col is None else np.concatenate([data.ravel(), mlp_col.ravel()])
    binary, cmap, norm = _grid_colors(mpl, values, num_masks)

    cell = 0.42 if not binary else 0.32
    width = max(3.5, cell * (num_heads + (1.6 if mlp_col is not None else 0)) + (2.2 if not binary else 1.4))
    height = max(2.6, cell * num_layers + 1.2)
    fig = _new_figure((width, height))
    if mlp_col is not None:
        ax, ax_mlp = fig.subplots(1, 2, gridspec_kw={"width_ratios": [num_heads, 1], "wspace": 0.08})
    else:
        ax, ax_mlp = fig.subplots(), None

    im = ax.imshow(data, cmap=cmap, norm=norm, aspect="equal", interpolation="nearest")
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_xticks(range(num_heads))
    ax.set_yticks(range(num_layers))
    ax.tick_params(labelsize=7 if max(num_heads, num_layers) > 16 else 8)
    # Thin white lines between cells make single heads countable in dense masks.
    ax.set_xticks(np.arange(-0.5, num_heads), minor=True)
    ax.set_yticks(np.arange(-0.5, num_layers), minor=True)
    ax.grid(which="minor", color="white", linewidth=0.8)
    ax.tick_params(which="minor", length=0)
    fontsize = 7 if num_heads > 12 else 8
    if not binary:
        _annotate(ax, data, cmap, norm, fontsize=fontsize)

    if ax_mlp is not None:
        _draw_mlp_column(ax_mlp, mlp_col, cmap, norm, None if binary else fontsize)
    _grid_legend(mpl, fig, im, [ax] if ax_mlp is None else [ax, ax_mlp], values, binary, cmap, norm, num_masks)
    if title:
        fig.suptitle(title)
    return _finish(fig, path)


def _mlp_column(mlp: Any, num_layers: int) -> np.ndarray | None:
    """The MLP blocks' values as a `[num_layers, 1]` column (None without `mlp`), checked."""
    if mlp is None:
        return None
    mlp_arr = _to_numpy(mlp, "mlp").reshape(-1)
    if mlp_arr.shape != (num_layers,):
        raise ValueError(f"mlp must have one value per layer ({num_layers}), got shape {tuple(mlp_arr.shape)}")
    if not np.isfinite(mlp_arr).all() or (mlp_arr < 0).any():
        raise ValueError("mlp must contain finite non-negative values")
    return mlp_arr[:, None]


def _grid_colors(mpl: Any, values: np.ndarray, num_masks: int | None) -> tuple[bool, Any, Any]:
    """Whether the grid is a kept/pruned mask (0/1 without `num_masks`), and its colormap and norm."""
    binary = num_masks is None and bool(np.isin(values, (0.0, 1.0)).all())
    if num_masks is not None:
        if num_masks <= 0:
            raise ValueError(f"num_masks must be positive, got {num_masks}")
        if values.max() > num_masks:
            raise ValueError(f"a unit is kept {values.max():g} times but num_masks is {num_masks}")
    if binary:
        cmap = mpl.colors.ListedColormap(["#e8e8e8", "#2b6cb0"])
        return True, cmap, mpl.colors.BoundaryNorm([-0.5, 0.5, 1.5], cmap.N)
    vmax = float(num_masks) if num_masks is not None else max(float(values.max()), 1.0)
    return False, mpl.colormaps["viridis"], mpl.colors.Normalize(vmin=0.0, vmax=vmax)


def _draw_mlp_column(ax_mlp: Any, mlp_col: np.ndarray, cmap: Any, norm: Any, fontsize: int | None) -> None:
    """The MLP column beside the head grid (counts written in its cells when `fontsize` is given)."""
    num_layers = mlp_col.shape[0]
    ax_mlp.imshow(mlp_col, cmap=cmap, norm=norm, aspect="equal", interpolation="nearest")
    ax_mlp.set_xticks([0], ["MLP"])
    ax_mlp.set_yticks(range(num_layers))
    ax_mlp.tick_params(labelleft=False, labelsize=8)
    ax_mlp.set_yticks(np.arange(-0.5, num_layers), minor=True)
    ax_mlp.grid(which="minor", axis="y", color="white", linewidth=0.8)
    ax_mlp.tick_params(which="minor", length=0)
    if fontsize is not None:
        _annotate(ax_mlp, mlp_col, cmap, norm, fontsize=fontsize)


def _grid_legend(mpl: Any, fig: Any, im: Any, axes: list, values: np.ndarray, binary: bool, cmap: Any, norm: Any,
                 num_masks: int | None) -> None:
    """Kept/pruned patches for a mask, a colorbar "kept by N of num_masks" for a frequency map."""
    if binary:
        patches = [mpl.patches.Patch(facecolor=cmap(1), label="kept"),
                   mpl.patches.Patch(facecolor=cmap(0), edgecolor="0.6", label="pruned")]
        kept = int(values.sum())
        fig.legend(handles=patches, loc="outside lower center", ncol=2, fontsize=8, frameon=False,
                   title=f"{kept} of {values.size} units kept", title_fontsize=8)
    else:
        label = f"kept by N of {num_masks} masks" if num_masks is not None else "kept by N masks"
        cbar = fig.colorbar(im, ax=axes, shrink=0.8, pad=0.02)
        cbar.set_label(label)
        if norm.vmax <= 20:
            cbar.set_ticks(range(0, int(math.floor(norm.vmax)) + 1, 1 if norm.vmax <= 12 else 2))


def plot_joint_frequency(
    joint: Any,
    label_a: str = "50% sparsity",
    label_b: str = "70% sparsity",
    rho: float | None = None,
    p_value: float | None = None,
    path: PathLike | None = None,
) -> Figure:
    """Heatmap of the joint head-frequency matrix: entry (i, j) = heads kept i times at A, j times at B.

    Rows (y, bottom to top) count subnetworks at sparsity A, columns (x) at sparsity B, so heads kept
    by every subnetwork at both sparsities (the core) sit in the top-right corner. The colour scale
    is symmetric-log so a handful of heads is visible next to the large always-pruned bin, and empty
    cells keep the lowest colour (a plain log scale would blank them out).
    """
    mpl = _mpl()
    data = _matrix(joint, "joint", nonnegative=True)
    rows, cols = data.shape
    cmap = mpl.colormaps["Blues"]
    vmax = max(float(data.max()), 1.0)
    # linscale=1 gives the 0..1 step as much colour range as a decade, so single heads stand out.
    norm = mpl.colors.SymLogNorm(linthresh=1.0, linscale=1.0, vmin=0.0, vmax=vmax, base=10)

    side = max(4.0, 0.42 * max(rows, cols) + 2.0)
    fig = _new_figure((side + 1.0, side))
    ax = fig.subplots()
    im = ax.imshow(data, cmap=cmap, norm=norm, origin="lower", aspect="equal", interpolation="nearest")
    ax.set_xticks(range(cols))
    ax.set_yticks(range(rows))
    ax.set_xticks(np.arange(-0.5, cols), minor=True)
    ax.set_yticks(np.arange(-0.5, rows), minor=True)
    ax.grid(which="minor", color="0.85", linewidth=0.5)
    ax.tick_params(which="minor", length=0)
    ax.set_xlabel(f"kept by j of {cols - 1} subnetworks ({label_b})")
    ax.set_ylabel(f"kept by i of {rows - 1} subnetworks ({label_a})")
    fontsize = 7 if max(rows, cols) > 10 else 8
    _annotate(ax, data, cmap, norm, fontsize=fontsize, faint_zero=True)
    cbar = fig.colorbar(im, ax=ax, shrink=0.8, pad=0.02)
    cbar.set_label("number of heads")
    # Plain counts (0, 1, 2, 5, 10, ...) instead of 10^k labels.
    ticks = [0.0] + [m * 10.0**e for e in range(int(math.log10(vmax)) + 1) for m in (1, 2, 5) if m * 10.0**e <= vmax]
    cbar.set_ticks(ticks, labels=[f"{t:g}" for t in ticks])
    cbar.ax.minorticks_off()

    title = f"Head frequency: {label_a} vs {label_b}"
    stats = []
    if rho is not None:
        stats.append(f"Spearman ρ = {rho:.2f}")
    if p_value is not None:
        stats.append(f"p = {p_value:.2g}")
    if stats:
        title += "\n" + ", ".join(stats)
    ax.set_title(title, fontsize=10)
    return _finish(fig, path)
