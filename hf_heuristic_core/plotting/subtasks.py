"""Figures of the subtask analyses (`analysis.subtasks`): per-layer weight sharing, and Lepori's A/B differences.

Like `plotting`, every function builds a standalone matplotlib `Figure` (no pyplot state), returns it, and writes
`<stem>.png` / `<stem>.pdf` when `path` is given. matplotlib is imported only when a function is called.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any
from ._base import save_figure

__all__ = ["plot_sharing_bars", "plot_subtask_differences"]


def _figure(figsize: tuple[float, float]):
    import matplotlib.figure
    return matplotlib.figure.Figure(figsize=figsize, layout="constrained")


def _save(fig: Any, path: Any) -> None:
    if path is not None:
        save_figure(fig, path)


def plot_sharing_bars(shares: Mapping[str, Mapping[str, float]], path: Any = None, title: str | None = None):
    """Grouped bars: per layer, the fraction of each mask's weights shared with the other masks
    (`sharing_fractions(...)`; the "total" entry is drawn last, apart)."""
    names = list(shares)
    layers = [layer for layer in next(iter(shares.values())) if layer != "total"] + ["total"]
    fig = _figure((max(4.0, 0.5 * len(layers) * max(1, len(names)) + 2), 3.2))
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        values = [shares[name].get(layer, math.nan) for layer in layers]
        ax.bar([x + i * width for x in range(len(layers))], [0 if math.isnan(v) else v for v in values],
               width=width, label=name)
    ax.set_xticks([x + width * (len(names) - 1) / 2 for x in range(len(layers))])
    ax.set_xticklabels([_short(layer) for layer in layers], rotation=60, ha="right", fontsize=7)
    ax.set_ylim(0, 1)
    ax.set_ylabel("shared fraction of the mask's weights")
    ax.legend(fontsize=8)
    ax.set_title(title or "Weights shared with the other masks, per layer")
    _save(fig, path)
    return fig


def plot_subtask_differences(results: Sequence[Mapping[str, Any]], labels: Sequence[str] | None = None,
                             path: Any = None, title: str | None = None):
    """Lepori's plot: per mask, D_sub and D_abl (`LeporiResult.to_dict()`), with the random-ablation control as a
    band (mean +/- 2 std of `random_d_abl`) behind D_abl."""
    labels = list(labels) if labels is not None else [f"mask {i}" for i in range(len(results))]
    fig = _figure((max(4.0, 1.2 * len(results) + 2), 3.2))
    ax = fig.add_subplot()
    for i, result in enumerate(results):
        randoms = list(result.get("random_d_abl") or [])
        if randoms:
            mean = sum(randoms) / len(randoms)
            std = math.sqrt(sum((r - mean) ** 2 for r in randoms) / max(1, len(randoms) - 1))
            ax.fill_between([i + 0.05, i + 0.35], mean - 2 * std, mean + 2 * std, color="0.8",
                            label="random ablation (mean ± 2 sd)" if i == 0 else None)
            ax.plot([i + 0.05, i + 0.35], [mean, mean], color="0.5")
        ax.scatter([i - 0.2], [result["d_sub"]], color="tab:blue", label="subnetwork: A − B" if i == 0 else None)
        ax.scatter([i + 0.2], [result["d_abl"]], color="tab:red", label="ablated: A − B" if i == 0 else None)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(results)))
    ax.set_xticklabels(labels)
    ax.set_ylim(-1.05, 1.05)
    ax.set_ylabel("accuracy difference (clamped to chance)")
    ax.legend(fontsize=7)
    ax.set_title(title or "Subtask test: target minus other subtask")
    _save(fig, path)
    return fig


def _short(layer: str) -> str:
    parts = layer.split(".")
    return ".".join(parts[-4:]) if len(parts) > 4 else layer
