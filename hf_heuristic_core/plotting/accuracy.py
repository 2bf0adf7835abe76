"""Accuracies of subnetworks: accuracy vs sparsity (paper Fig. 4) and per-set accuracy strips (Fig. 2)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ._base import (
    PathLike,
    _as_float,
    _case_label,
    _check_rows,
    _finish,
    _full_for,
    _grid_shape,
    _infer_cases,
    _mpl,
    _new_figure,
    _percent_axis,
)

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _group_by_sparsity(rows: Sequence[Mapping[str, Any]], case: str) -> dict[float | None, list[float]]:
    groups: dict[float | None, list[float]] = {}
    for row in rows:
        acc = _as_float(row.get(case))
        if acc is None:
            continue
        sp = _as_float(row.get("sparsity"))
        key = None if sp is None else round(sp, 9)  # float noise must not split a group
        groups.setdefault(key, []).append(acc)
    return groups


def _sparsity_label(sp: float | None, all_sp: Sequence[float | None]) -> str:
    if sp is None:
        return "all"
    fractions = all(s is None or s <= 1 for s in all_sp)
    return f"{sp * 100:g}% sparsity" if fractions else f"{sp:g} sparsity"


def _all_fractions(groups: Mapping[Any, Sequence[float]]) -> bool:
    values = [a for g in groups.values() for a in g]
    return bool(values) and min(values) >= 0.0 and max(values) <= 1.0


def _fraction_limits(ax: Axes, values: np.ndarray) -> None:
    """Accuracies in [0, 1]: a y range inside [0, 1] with a small margin around the data, never beyond."""
    finite = values[np.isfinite(values)]
    if not finite.size or finite.min() < 0 or finite.max() > 1:
        return
    low, high = float(finite.min()), float(finite.max())
    margin = max(0.02, 0.08 * (high - low), (0.1 - (high - low)) / 2)   # at least 10 points of range
    low, high = low - margin, high + margin
    if low < 0.0:
        low, high = 0.0, min(1.0, high - low)
    if high > 1.0:
        low, high = max(0.0, low - (high - 1.0)), 1.0
    ax.set_ylim(low, high)


def plot_accuracy_vs_sparsity(
    results: Sequence[Mapping[str, Any]],
    full_accuracy: float | Mapping[str, float] | None = None,
    cases: Sequence[str] | None = None,
    path: PathLike | None = None,
    *,
    case_labels: Mapping[str, str] | None = None,
) -> Figure:
    """Accuracy vs sparsity, one panel per evaluation case (the paper's Figure 4).

    ``results`` rows look like ``{"sparsity": 0.5, "seed": 42, "<case>": acc, ...}``. Each panel shows
    the mean over seeds with a ±std band (population std, ``ddof=0``) and every seed as a dot, so a
    single bad seed is not hidden in the average. ``full_accuracy`` (a number, or ``{case: acc}``)
    is drawn as a dashed horizontal line. Rows with a missing/NaN case value are skipped.
    """
    rows = _check_rows(results)
    if not any(_as_float(r.get("sparsity")) is not None for r in rows):
        raise ValueError("results rows need a numeric 'sparsity' key")
    cases = _infer_cases(rows, cases)
    n_rows, n_cols = _grid_shape(len(cases))
    fig = _new_figure((3.6 * n_cols, 2.9 * n_rows))
    axes = np.atleast_1d(fig.subplots(n_rows, n_cols, sharex=True, squeeze=False)).ravel()
    all_sp = np.array([s for r in rows if (s := _as_float(r.get("sparsity"))) is not None])
    color = "#2b6cb0"
    for ax, case in zip(axes, cases):
        groups = {k: v for k, v in _group_by_sparsity(rows, case).items() if k is not None}
        _draw_seed_band(ax, groups, color)
        full = _full_for(full_accuracy, case)
        if full is not None:
            ax.axhline(full, ls="--", color="0.25", lw=1.1, label="full model")
        ax.set_title(_case_label(case, case_labels, width=32), fontsize=9)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
        values = np.array([a for g in groups.values() for a in g] + ([full] if full is not None else []))
        _percent_axis(ax.yaxis, values)
        _fraction_limits(ax, values)
        ax.xaxis.set_tick_params(labelbottom=True)
    for ax in axes[len(cases):]:
        ax.remove()
    used = axes[: len(cases)]
    _percent_axis(used[0].xaxis, all_sp)
    for ax in used[-n_cols:]:
        ax.set_xlabel("sparsity")
    for ax in used[::n_cols]:
        ax.set_ylabel("accuracy")
    handles, labels = max((ax.get_legend_handles_labels() for ax in used), key=lambda hl: len(hl[0]))
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncol=len(handles), fontsize=8, frameon=False)
    return _finish(fig, path)


def _draw_seed_band(ax: Any, groups: Mapping[float, list[float]], color: str) -> None:
    """One panel's mean over seeds with its ±std band and every seed as a dot ("no data" when empty)."""
    if not groups:
        ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="0.5")
        return
    xs = np.array(sorted(groups))
    means = np.array([np.mean(groups[x]) for x in xs])
    stds = np.array([np.std(groups[x]) for x in xs])
    lo, hi = means - stds, means + stds
    if _all_fractions(groups):   # accuracy cannot leave [0, 100]%: neither may its band
        lo, hi = np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0)
    ax.fill_between(xs, lo, hi, color=color, alpha=0.2, lw=0, label="± std")
    ax.plot(xs, means, "-", color=color, lw=1.6, label="mean over seeds")
    px = np.concatenate([[x] * len(groups[x]) for x in xs])
    py = np.concatenate([groups[x] for x in xs])
    ax.scatter(px, py, s=10, color=color, alpha=0.55, edgecolors="none", label="seed", zorder=3, clip_on=False)


def plot_subnetwork_accuracies(
    results: Sequence[Mapping[str, Any]],
    full_accuracy: float | Mapping[str, float] | None,
    cases: Sequence[str] | None = None,
    kind: str = "strip",
    path: PathLike | None = None,
    *,
    case_labels: Mapping[str, str] | None = None,
) -> Figure:
    """Accuracy of every subnetwork per evaluation case, next to the full model (the paper's Figure 2).

    Shows the spread across pruning seeds that a mean would hide: ID accuracy stays flat while OOD
    cases scatter widely. ``kind="strip"`` draws jittered dots, ``kind="violin"`` violins with the
    individual points on top. Rows are grouped by their ``"sparsity"`` value (exact, so pass the
    nominal/target sparsity there, not the achieved one); rows without it form one group. The full
    model (a number or ``{case: acc}``) is a black bar across each case's slot.
    """
    mpl = _mpl()
    if kind not in ("strip", "violin"):
        raise ValueError(f"kind must be 'strip' or 'violin', got {kind!r}")
    rows = _check_rows(results)
    cases = _infer_cases(rows, cases)
    per_case = {case: _group_by_sparsity(rows, case) for case in cases}
    sparsities: list[float | None] = sorted(
        {sp for g in per_case.values() for sp in g}, key=lambda s: (s is None, s if s is not None else 0.0)
    )
    if not sparsities:
        raise ValueError("results contain no accuracy values for the requested cases")
    n_groups = len(sparsities)
    slot = 0.8  # width of one case's slot on the x axis
    sub = slot / n_groups
    colors = mpl.colormaps["tab10"].colors
    rng = np.random.default_rng(0)  # fixed jitter: the same data gives the same figure

    width = max(5.0, 0.35 * len(cases) * max(1.0, n_groups * 0.8) + 2.0)
    fig = _new_figure((width, 4.2))
    ax = fig.subplots()
    full_label_done = False
    labelled: set[float | None] = set()
    for ci, case in enumerate(cases):
        for gi, sp in enumerate(sparsities):
            accs = per_case[case].get(sp)
            if not accs:
                continue
            label = None
            if sp not in labelled:
                labelled.add(sp)
                label = _sparsity_label(sp, sparsities) if n_groups > 1 else "subnetwork"
            _draw_group(ax, accs, ci - slot / 2 + sub * (gi + 0.5), sub, colors[gi % len(colors)], label,
                        kind == "violin", rng)
        full = _full_for(full_accuracy, case)
        if full is not None:
            ax.hlines(full, ci - slot / 2, ci + slot / 2, colors="black", lw=2.0, zorder=4,
                      label=None if full_label_done else "full model")
            full_label_done = True
    _case_ticks(ax, cases, case_labels)
    _finish_case_axes(ax, len(cases), per_case, sparsities)
    return _finish(fig, path)


def _finish_case_axes(ax: Any, num_cases: int, per_case: Mapping[str, Mapping[Any, list[float]]],
                      sparsities: list[float | None]) -> None:
    """Limits, the accuracy axis, separators between cases, the legend and the title."""
    ax.set_xlim(-0.6, num_cases - 0.4)
    ax.set_ylabel("accuracy")
    _percent_axis(ax.yaxis, np.array([a for g in per_case.values() for v in g.values() for a in v]))
    ax.grid(axis="y", alpha=0.3)
    for x in np.arange(0.5, num_cases - 1):
        ax.axvline(x, color="0.9", lw=0.8, zorder=0)
    title = "Subnetwork accuracy per evaluation set"
    if len(sparsities) == 1 and sparsities[0] is not None:
        title += f" ({_sparsity_label(sparsities[0], sparsities)})"
    # Outside the axes, under the title: inside, it covered a case's dots or the full-model bar.
    ax.legend(fontsize=8, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=4, frameon=False)
    ax.set_title(title, fontsize=10, pad=22)


def _draw_group(ax: Any, accs: list[float], center: float, sub: float, color: Any, label: str | None,
                violin: bool, rng: np.random.Generator) -> None:
    """One sparsity group of one case: jittered dots, on a violin when asked and the values spread."""
    if violin and len(accs) > 1 and np.ptp(accs) > 0:
        parts = ax.violinplot([accs], positions=[center], widths=sub * 0.9, showextrema=False)
        for body in parts["bodies"]:
            body.set_facecolor(color)
            body.set_alpha(0.35)
        jitter = 0.0
    else:
        jitter = sub * 0.3
    xs = center + rng.uniform(-jitter, jitter, size=len(accs))
    ax.scatter(xs, accs, s=14, color=color, alpha=0.75, edgecolors="none", zorder=3, label=label)


def _case_ticks(ax: Any, cases: Sequence[str], case_labels: Mapping[str, str] | None) -> None:
    """One tick per case; many cases get one-line labels, rotated."""
    ax.set_xticks(range(len(cases)))
    many = len(cases) > 6
    labels = [_case_label(c, case_labels, width=40 if many else 16) for c in cases]
    if many:
        labels = [lab.replace("\n", "") for lab in labels]
    ax.set_xticklabels(labels, rotation=55 if many else 0, ha="right" if many else "center",
                       rotation_mode="anchor", fontsize=7 if many else 8)
