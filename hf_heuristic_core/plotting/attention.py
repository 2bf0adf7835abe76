"""One head's attention matrix with token labels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ._base import (
    PathLike,
    _finish,
    _matrix,
    _mpl,
    _new_figure,
)

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure


def plot_attention_pattern(
    attention: Any,
    tokens: Sequence[str],
    title: str | None = None,
    path: PathLike | None = None,
) -> Figure:
    """One head's attention matrix ``[T, T]`` (rows = queries, columns = keys) with token labels.

    Meant for inspecting core heads (previous/next-token, separator or repeated-token patterns);
    squeeze batch/head dimensions before calling. The colour scale starts at 0 so weak attention
    looks weak regardless of the head's maximum.
    """
    mpl = _mpl()
    data = _matrix(attention, "attention", nonnegative=True)
    t_q, t_k = data.shape
    if t_q != t_k:
        raise ValueError(f"attention must be square [T, T], got shape {(t_q, t_k)}")
    tokens = [str(t) for t in tokens]
    if len(tokens) != t_q:
        raise ValueError(f"got {len(tokens)} tokens for a {t_q}x{t_k} attention matrix")
    cmap = mpl.colormaps["Blues"]
    norm = mpl.colors.Normalize(vmin=0.0, vmax=max(float(data.max()), 1e-12))

    side = min(max(4.0, 0.28 * t_q + 2.0), 20.0)
    fontsize = 8 if t_q <= 30 else max(4.0, 8 - (t_q - 30) / 12)
    fig = _new_figure((side + 1.0, side))
    ax = fig.subplots()
    im = ax.imshow(data, cmap=cmap, norm=norm, aspect="equal", interpolation="nearest")
    ax.set_xticks(range(t_k), tokens, rotation=90, fontsize=fontsize)
    ax.set_yticks(range(t_q), tokens, fontsize=fontsize)
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query")
    cbar = fig.colorbar(im, ax=ax, shrink=0.8, pad=0.02)
    cbar.set_label("attention weight")
    if title:
        ax.set_title(title, fontsize=10)
    return _finish(fig, path)
