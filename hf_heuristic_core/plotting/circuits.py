"""Faithfulness over circuit size (MIB's circuit-localization curve), one line per ranking, CPR / CMD in the legend.

Input: per ranking name, one curve or a list of curves (seeds) as `FaithfulnessCurve` objects or their dicts
(`sizes`, `faithfulness`, `cpr`, `cmd`). Several curves are drawn as their mean with a min-max band. The x-axis is
logarithmic so that MIB's small sizes (0.1% .. 5%) are visible; CPR and CMD are areas on MIB's linear axis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._base import PathLike, _finish, _new_figure

__all__ = ["plot_faithfulness_curves"]

MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def _as_dict(curve: Any) -> Mapping[str, Any]:
    data = curve.to_dict() if hasattr(curve, "to_dict") else curve
    for key in ("sizes", "faithfulness"):
        if key not in data:
            raise ValueError(f"a faithfulness curve needs {key!r}; got keys {sorted(data)}")
    if len(data["sizes"]) != len(data["faithfulness"]):
        raise ValueError(f"a curve has {len(data['sizes'])} sizes but {len(data['faithfulness'])} faithfulness values")
    return data


def plot_faithfulness_curves(curves: Mapping[str, Any], path: PathLike | None = None, title: str | None = None):
    """One line per ranking (mean over its curves, min-max band when there are several); returns the Figure."""
    if not curves:
        raise ValueError("plot_faithfulness_curves needs at least one curve")
    fig = _new_figure((6.4, 3.8))
    ax = fig.add_subplot()
    for index, (name, value) in enumerate(curves.items()):
        group = [_as_dict(c) for c in (value if isinstance(value, Sequence) and not isinstance(value, Mapping)
                                       else [value])]
        sizes = np.asarray(group[0]["sizes"], dtype=float)
        if any(not np.allclose(np.asarray(c["sizes"], dtype=float), sizes) for c in group):
            raise ValueError(f"the curves of {name!r} have different circuit sizes")
        values = np.asarray([c["faithfulness"] for c in group], dtype=float)
        mean = np.nanmean(values, axis=0)
        label = name
        if all("cpr" in c and "cmd" in c for c in group):
            cpr = np.mean([c["cpr"] for c in group])
            cmd = np.mean([c["cmd"] for c in group])
            label = f"{name} (CPR {cpr:.3f}, CMD {cmd:.3f}{', n=%d' % len(group) if len(group) > 1 else ''})"
        line, = ax.plot(sizes * 100, mean, marker=MARKERS[index % len(MARKERS)], ms=4, lw=1.6, label=label)
        if len(group) > 1:
            ax.fill_between(sizes * 100, np.nanmin(values, axis=0), np.nanmax(values, axis=0),
                            color=line.get_color(), alpha=0.15, lw=0)
    ax.axhline(1.0, color="0.4", lw=0.8, ls="--")
    ax.axhline(0.0, color="0.4", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("circuit size (% of heads and MLP blocks)")
    ax.set_ylabel("faithfulness f")
    ax.set_title(title or "Faithfulness over circuit size (MIB)")
    ax.legend(fontsize=7, loc="best")
    return _finish(fig, path)
