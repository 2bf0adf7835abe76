"""Subtask Induction figure: test accuracy against the number of disambiguating examples, one line per arm.

The line is the mean over seeds, the band spans the seeds' minimum to maximum (with 3-5 seeds a standard deviation
would suggest more precision than there is). A dashed line marks chance. Standalone matplotlib `Figure`, written as
`<stem>.png` / `<stem>.pdf` when `path` is given; matplotlib is imported only when called.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from ._base import save_figure

__all__ = ["plot_induction_curves"]


def plot_induction_curves(summary: Sequence[Mapping[str, Any]], path: Any = None, chance: float | None = None,
                          title: str | None = None):
    """`summary`: rows with arm, k, mean, min, max (as `induction.report.summarize` returns)."""
    import matplotlib.figure
    import matplotlib.ticker

    rows = list(summary)
    if not rows:
        raise ValueError("plot_induction_curves: the summary is empty; run at least one (arm, k, seed) first.")
    fig = matplotlib.figure.Figure(figsize=(5.0, 3.4), layout="constrained")
    ax = fig.add_subplot()
    arms = list(dict.fromkeys(row["arm"] for row in rows))
    for arm in arms:
        points = sorted((row for row in rows if row["arm"] == arm), key=lambda row: row["k"])
        ks = [row["k"] for row in points]
        line, = ax.plot(ks, [row["mean"] for row in points], marker="o", label=f"{arm} (n={points[0]['n']})")
        ax.fill_between(ks, [row["min"] for row in points], [row["max"] for row in points],
                        color=line.get_color(), alpha=0.2, linewidth=0)
    if chance is not None:
        ax.axhline(chance, color="grey", linestyle="--", linewidth=1, label="chance")
    ks = sorted({row["k"] for row in rows})
    if len(ks) > 1 and ks[0] > 0:
        ax.set_xscale("log")
    ax.set_xticks(ks, [str(k) for k in ks])   # the k values themselves, not 2x10^1
    ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    ax.set_xlabel("disambiguating training examples k")
    ax.set_ylabel("test accuracy (best validation epoch)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title(title or "Subtask Induction: mean over seeds, band = min..max")
    if path is not None:
        save_figure(fig, path)
    return fig
