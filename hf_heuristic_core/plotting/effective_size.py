"""Effective size and full-model accuracy over fine-tuning (the paper's Fig. 6)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ._base import (
    PathLike,
    _as_float,
    _check_rows,
    _finish,
    _mpl,
    _new_figure,
    _percent_axis,
)

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure


def plot_effective_size(
    records: Sequence[Mapping[str, Any]],
    groups: Sequence[str] | None = None,
    path: PathLike | None = None,
    *,
    spread: str = "minmax",
) -> Figure:
    """Effective size (top) and full-model accuracy (bottom) over fine-tuning steps (the paper's Figure 6).

    ``records`` rows: ``{"step", "seed", "group", "effective_size", "full_accuracy"}``; ``group`` is
    the evaluation set (e.g. ID / OOD / mixed). Per group and step the line is the mean over seeds and
    the band shows the spread across seeds (``spread="minmax"`` or ``"std"``), because the paper's
    effective size is computed per seed and then averaged. Either value may be None/absent in a row.
    """
    mpl = _mpl()
    if spread not in ("minmax", "std"):
        raise ValueError(f"spread must be 'minmax' or 'std', got {spread!r}")
    rows = _check_rows(records, "records")
    for i, row in enumerate(rows):
        for key in ("step", "group"):
            if key not in row:
                raise ValueError(f"records[{i}] lacks {key!r}")
        if _as_float(row["step"]) is None:
            raise ValueError(f"records[{i}]['step'] must be a number, got {row['step']!r}")
    present = list(dict.fromkeys(str(r["group"]) for r in rows))
    if groups is None:
        groups = present
    else:
        groups = [groups] if isinstance(groups, str) else [str(g) for g in groups]
        missing = [g for g in groups if g not in present]
        if missing:
            raise ValueError(f"groups not found in records: {missing}")
    if not any(_as_float(r.get(k)) is not None for r in rows for k in ("effective_size", "full_accuracy")):
        raise ValueError("records have no numeric 'effective_size' or 'full_accuracy' values")

    fig = _new_figure((6.4, 5.6))
    ax_size, ax_acc = fig.subplots(2, 1, sharex=True)
    colors = mpl.colormaps["tab10"].colors
    for key, ax in (("effective_size", ax_size), ("full_accuracy", ax_acc)):
        every: list[float] = []
        for gi, group in enumerate(groups):
            by_step: dict[float, list[float]] = {}
            for row in rows:
                if str(row["group"]) != group:
                    continue
                v = _as_float(row.get(key))
                if v is not None:
                    by_step.setdefault(float(row["step"]), []).append(v)
            if not by_step:
                continue
            steps = np.array(sorted(by_step))
            vals = [np.asarray(by_step[s]) for s in steps]
            mean = np.array([v.mean() for v in vals])
            if spread == "minmax":
                lo, hi = np.array([v.min() for v in vals]), np.array([v.max() for v in vals])
            else:
                sd = np.array([v.std() for v in vals])
                lo, hi = mean - sd, mean + sd
            color = colors[gi % len(colors)]
            ax.fill_between(steps, lo, hi, color=color, alpha=0.18, lw=0)
            ax.plot(steps, mean, "o-", color=color, ms=3.5, lw=1.6, label=group)
            every.extend(np.concatenate(vals).tolist())
        _percent_axis(ax.yaxis, np.asarray(every))
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
    band = "min–max over seeds" if spread == "minmax" else "± std over seeds"
    ax_size.set_ylabel("effective size")
    ax_size.set_title(f"Effective size over fine-tuning (line: mean, band: {band})", fontsize=10)
    ax_acc.set_ylabel("full-model accuracy")
    ax_acc.set_xlabel("fine-tuning step")
    if ax_size.get_legend_handles_labels()[0]:
        ax_size.legend(title="evaluation set", fontsize=8, title_fontsize=8, loc="best")
    elif ax_acc.get_legend_handles_labels()[0]:
        ax_acc.legend(title="evaluation set", fontsize=8, title_fontsize=8, loc="best")
    return _finish(fig, path)
