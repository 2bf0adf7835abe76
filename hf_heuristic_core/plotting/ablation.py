"""The ablation table as a heatmap (the paper's Table 3 as a picture)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from ._base import (
    PathLike,
    _annotate,
    _case_label,
    _finish,
    _is_number,
    _mpl,
    _new_figure,
)

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure


SUM_PREFIX = "sum of singles"


def plot_ablation_table(
    table: Mapping[str, Mapping[str, float]],
    path: PathLike | None = None,
    *,
    case_labels: Mapping[str, str] | None = None,
    fmt: str = "+.1f",
    scale: float = 100.0,
) -> Figure:
    """Heatmap of accuracy changes from ablations (the paper's Table 3 as a picture).

    ``table`` is ``{row_label: {case: delta}}`` with deltas as fractions (``AblationTable.plot_table()``) and rows
    such as ``"L4.H0"`` or ``"L2.H5 + L3.H7 + L4.H0"``. Cells show ``delta * scale``: points by default, as in
    ``report.md``. The diverging colormap is centred at 0 (red = accuracy drops, blue = rises) with symmetric
    limits set by the measured rows: "sum of singles ..." rows (sums that can exceed any single ablation) are
    drawn on the same scale, saturating, so they do not wash out the single ablations. Missing cells are blank
    and marked "–"; values are annotated with ``format(delta * scale, fmt)``.
    """
    mpl = _mpl()
    row_labels, cases, data = _table_matrix(table)
    data = data * scale
    finite = data[np.isfinite(data)]
    if finite.size == 0:
        raise ValueError("table has no numeric values")
    measured = np.array([not str(label).startswith(SUM_PREFIX) for label in row_labels])
    scaled = data[measured] if measured.any() else data
    limit = float(np.abs(scaled[np.isfinite(scaled)]).max(initial=0.0)) or float(np.abs(finite).max()) or 1.0
    cmap = mpl.colormaps["RdBu"].with_extremes(bad="0.93")
    norm = mpl.colors.Normalize(vmin=-limit, vmax=limit)

    max_label = max(len(str(r)) for r in row_labels)
    width = max(4.5, 1.05 * len(cases) + 0.075 * max_label + 2.2)
    height = max(2.4, 0.45 * len(row_labels) + 1.8)
    fig = _new_figure((width, height))
    ax = fig.subplots()
    im = ax.imshow(np.ma.masked_invalid(data), cmap=cmap, norm=norm, aspect="auto", interpolation="nearest")
    ax.set_yticks(range(len(row_labels)), [str(r) for r in row_labels], fontsize=8)
    ax.set_xticks(range(len(cases)), [_case_label(c, case_labels, width=14) for c in cases], fontsize=8)
    ax.xaxis.tick_top()
    ax.set_xlabel("evaluation set")
    ax.xaxis.set_label_position("top")
    ax.set_ylabel("ablated")
    ax.tick_params(length=0)
    _annotate(ax, data, cmap, norm, fmt=lambda v: format(v, fmt) if math.isfinite(v) else "–", fontsize=8)
    saturated = float(np.abs(finite).max()) > limit   # sums beyond the measured range: an arrow on the bar
    cbar = fig.colorbar(im, ax=ax, shrink=0.85, pad=0.02, extend="both" if saturated else "neither")
    cbar.set_label("accuracy change (points)" if scale == 100.0 else "accuracy change")
    return _finish(fig, path)


def _table_matrix(table: Mapping[str, Mapping[str, float]]) -> tuple[list[str], list[str], np.ndarray]:
    """Row labels, cases (in first-seen order) and the `[rows, cases]` values (NaN where missing), checked."""
    if not isinstance(table, Mapping) or not table:
        raise ValueError("table must be a non-empty {row_label: {case: delta}} dict")
    row_labels = list(table)
    cases: list[str] = []
    for label, row in table.items():
        if not isinstance(row, Mapping):
            raise ValueError(f"table[{label!r}] must be a {{case: delta}} dict, got {type(row).__name__}")
        cases.extend(c for c in row if c not in cases)
    if not cases:
        raise ValueError("table has no evaluation cases")
    data = np.full((len(row_labels), len(cases)), np.nan)
    for i, label in enumerate(row_labels):
        for j, case in enumerate(cases):
            if case in table[label]:
                v = table[label][case]
                if v is not None and not _is_number(v):
                    raise ValueError(f"table[{label!r}][{case!r}] must be a number, got {v!r}")
                data[i, j] = np.nan if v is None else float(v)
    return row_labels, cases, data
