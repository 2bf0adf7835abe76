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


MARKERS = ("o", "s", "^", "D", "v", "P")
LINESTYLES = ("-", "--", ":", "-.")


def _style(index: int) -> dict[str, Any]:
    """Each group its marker and line style, later groups thinner and smaller: a group drawn on top of an equal one
    (OOD under "mixed") leaves the one below visible around it."""
    return {"marker": MARKERS[index % len(MARKERS)], "ls": LINESTYLES[index % len(LINESTYLES)],
            "ms": max(3.0, 7.5 - 1.8 * index), "lw": max(1.0, 2.6 - 0.6 * index)}


def _series(rows: Sequence[Mapping[str, Any]], group: str, key: str, spread: str
            ) -> dict[str, np.ndarray] | None:
    """{step, mean, min, max} of `key` over seeds for `group` (min/max: the spread, by `spread`)."""
    by_step: dict[float, list[float]] = {}
    for row in rows:
        if str(row["group"]) == group and (v := _as_float(row.get(key))) is not None:
            by_step.setdefault(float(row["step"]), []).append(v)
    if not by_step:
        return None
    steps = np.array(sorted(by_step))
    vals = [np.asarray(by_step[s]) for s in steps]
    mean = np.array([v.mean() for v in vals])
    if spread == "minmax":
        lo, hi = np.array([v.min() for v in vals]), np.array([v.max() for v in vals])
    else:
        sd = np.array([v.std() for v in vals])
        lo, hi = mean - sd, mean + sd
    return {"step": steps, "mean": mean, "min": lo, "max": hi}


def _band_series(band: Mapping[str, Any], group: str) -> dict[str, np.ndarray]:
    series = {k: np.asarray(band.get(k), dtype=float) for k in ("step", "mean", "min", "max")}
    sizes = {k: v.shape for k, v in series.items()}
    if any(v.ndim != 1 for v in series.values()) or len(set(sizes.values())) != 1:
        raise ValueError(f"bands[{group!r}] needs 1-D 'step', 'mean', 'min' and 'max' of one length, got {sizes}")
    return series


def plot_effective_size(
    records: Sequence[Mapping[str, Any]],
    groups: Sequence[str] | None = None,
    path: PathLike | None = None,
    *,
    spread: str = "minmax",
    bands: Mapping[str, Mapping[str, Any]] | None = None,
) -> Figure:
    """Effective size (top) and full-model accuracy (bottom) over fine-tuning steps (the paper's Figure 6).

    ``records`` rows: ``{"step", "seed", "group", "effective_size", "full_accuracy"}``; ``group`` is the evaluation
    set (e.g. ID / OOD / mixed). Per group and step the line is the mean over seeds and, when seeds differ, a band
    shows their spread (``spread="minmax"`` or ``"std"``), because the paper's effective size is computed per seed
    and then averaged. ``bands`` (``{group: {"step", "mean", "min", "max"}}``, e.g. ``EffectiveSizeResults.bands()``)
    gives the effective-size line and min-max band directly. The title names a band only when one is drawn.
    Either value may be None/absent in a row.
    """
    mpl = _mpl()
    if spread not in ("minmax", "std"):
        raise ValueError(f"spread must be 'minmax' or 'std', got {spread!r}")
    rows, groups = _checked_records(records, groups, bands)

    fig = _new_figure((6.4, 5.6))
    ax_size, ax_acc = fig.subplots(2, 1, sharex=True)
    colors = mpl.colormaps["tab10"].colors
    band_drawn = {"effective_size": False, "full_accuracy": False}
    for key, ax in (("effective_size", ax_size), ("full_accuracy", ax_acc)):
        every: list[float] = []
        for gi, group in enumerate(groups):
            if key == "effective_size" and bands and group in bands:
                series = _band_series(bands[group], group)
            else:
                series = _series(rows, group, key, spread)
            if series is None:
                continue
            color = colors[gi % len(colors)]
            if np.any(series["max"] - series["min"] > 1e-12):
                ax.fill_between(series["step"], series["min"], series["max"], color=color, alpha=0.18, lw=0)
                band_drawn[key] = True
            ax.plot(series["step"], series["mean"], color=color, label=group, **_style(gi))
            every.extend(np.concatenate([series["min"], series["max"]]).tolist())
        _percent_axis(ax.yaxis, np.asarray(every))
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
    ax_size.set_ylabel("effective size")
    ax_size.set_title(_title(rows, bands, spread, band_drawn["effective_size"]), fontsize=10)
    ax_acc.set_ylabel("full-model accuracy")
    ax_acc.set_xlabel("fine-tuning step")
    if ax_size.get_legend_handles_labels()[0]:
        ax_size.legend(title="evaluation set", fontsize=8, title_fontsize=8, loc="best")
    elif ax_acc.get_legend_handles_labels()[0]:
        ax_acc.legend(title="evaluation set", fontsize=8, title_fontsize=8, loc="best")
    return _finish(fig, path)


def _title(rows: Sequence[Mapping[str, Any]], bands: Any, spread: str, band_drawn: bool) -> str:
    """The title names the band only when one is drawn."""
    band = "± std over seeds" if not bands and spread == "std" else "min–max over seeds"
    title = "Effective size over fine-tuning"
    if band_drawn:
        title += f" (line: mean, band: {band})"
    elif len({r.get("seed") for r in rows}) > 1:
        title += " (mean over seeds; they agree)"
    return title


def _checked_records(records: Sequence[Mapping[str, Any]], groups: Sequence[str] | str | None,
                     bands: Mapping[str, Mapping[str, Any]] | None) -> tuple[list[Mapping[str, Any]], list[str]]:
    """The rows (each with a numeric step and a group) and the groups to draw, every one of them present."""
    rows = _check_rows(records, "records")
    for i, row in enumerate(rows):
        for key in ("step", "group"):
            if key not in row:
                raise ValueError(f"records[{i}] lacks {key!r}")
        if _as_float(row["step"]) is None:
            raise ValueError(f"records[{i}]['step'] must be a number, got {row['step']!r}")
    present = list(dict.fromkeys([str(r["group"]) for r in rows] + [str(g) for g in (bands or {})]))
    if groups is None:
        groups = present
    else:
        groups = [groups] if isinstance(groups, str) else [str(g) for g in groups]
        missing = [g for g in groups if g not in present]
        if missing:
            raise ValueError(f"groups not found in records: {missing}")
    if not bands and not any(_as_float(r.get(k)) is not None for r in rows for k in ("effective_size",
                                                                                       "full_accuracy")):
        raise ValueError("records have no numeric 'effective_size' or 'full_accuracy' values")
    return rows, list(groups)
