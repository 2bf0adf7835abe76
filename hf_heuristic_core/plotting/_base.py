"""Shared plumbing of the figures: lazy matplotlib, atomic PNG + PDF saving, input checks, labels.

Every ``plot_*`` function takes plain data (torch tensors, numpy arrays, lists, dicts), builds a
standalone :class:`matplotlib.figure.Figure` (no pyplot, so nothing leaks into a global figure
registry and any backend works, including headless ``Agg``) and returns it. When ``path`` is given the
figure is also written as ``<stem>.png`` (150 dpi) and ``<stem>.pdf``; see :func:`save_figure` and
:func:`figure_paths`.

matplotlib is an optional dependency (``pip install hf_heuristic_core[plot]``); it is imported only
when a function here is called, so the rest of the package works without it.
"""

from __future__ import annotations

import math
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


PathLike = str | os.PathLike

PNG_DPI = 150
_FORMATS = ("png", "pdf")

# Display names of the MNLI evaluation sets; HANS subcases get one derived scheme (`case_label`). Override per call
# with ``case_labels=``.
CASE_LABELS: dict[str, str] = {
    "validation_matched": "MNLI-m",
    "validation_mismatched": "MNLI-mm",
    "mnli-matched": "MNLI-m",
    "mnli-mismatched": "MNLI-mm",
}
# HANS case names are `<heuristic>_<tag>_<subcase>` (e.g. lexical_overlap_ln_subject-object_swap).
_HANS_CASE = re.compile(r"^(lexical_overlap|subsequence|constituent)_(ln|sn|cn)_(.+)$")
_HEURISTIC_SHORT = {"lexical_overlap": "LO", "subsequence": "Sub", "constituent": "Const"}

# Row keys that describe a run rather than an evaluation case.
_RESERVED_KEYS = frozenset({"sparsity", "seed", "step", "group", "target_sparsity", "achieved_sparsity"})


# --------------------------------------------------------------------------------------------------
# matplotlib access and saving
# --------------------------------------------------------------------------------------------------


def _mpl() -> Any:
    """Import matplotlib lazily so that plotting stays an optional extra."""
    try:
        import matplotlib
        import matplotlib.colors
        import matplotlib.figure
        import matplotlib.patches
        import matplotlib.ticker
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "hf_heuristic_core.plotting needs matplotlib: pip install hf_heuristic_core[plot]"
        ) from exc
    return matplotlib


def _new_figure(figsize: tuple[float, float]) -> Figure:
    """A Figure that is not registered with pyplot (safe in threads, servers and notebooks alike)."""
    mpl = _mpl()
    return mpl.figure.Figure(figsize=figsize, layout="constrained")


def figure_paths(path: PathLike) -> list[Path]:
    """The files :func:`save_figure` writes for ``path``: ``[<stem>.png, <stem>.pdf]``.

    A trailing ``.png`` or ``.pdf`` is dropped so ``"fig"``, ``"fig.png"`` and ``"fig.pdf"`` all name
    the same pair; any other suffix (``"run.v2"``) is kept as part of the stem.
    """
    p = Path(path)
    if p.suffix.lower() in {".png", ".pdf"}:
        p = p.with_suffix("")
    if not p.name:
        raise ValueError(f"figure path {str(path)!r} has no file name")
    return [p.with_name(f"{p.name}.{fmt}") for fmt in _FORMATS]


def save_figure(fig: Figure, path: PathLike) -> list[Path]:
    """Write ``fig`` as ``<stem>.png`` (150 dpi) and ``<stem>.pdf`` and return both paths.

    Each file is rendered to a temporary file in the destination folder and moved into place with
    ``os.replace``, so a reader (or a crash) never sees a half-written figure, and an existing figure
    is only replaced once both new files rendered successfully. Missing parent folders are created.
    """
    targets = figure_paths(path)
    targets[0].parent.mkdir(parents=True, exist_ok=True)
    temps: list[Path] = []
    engine = fig.get_layout_engine()
    try:
        for index, (target, fmt) in enumerate(zip(targets, _FORMATS)):
            tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
            # os.open with 0o666 honours the umask, unlike tempfile.mkstemp (always 0600).
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            temps.append(tmp)
            with os.fdopen(fd, "wb") as fh:
                fig.savefig(fh, format=fmt, dpi=PNG_DPI, bbox_inches="tight")
                fh.flush()
                os.fsync(fh.fileno())
            if index == 0 and engine is not None:
                # The first format laid the figure out; the others reuse that layout instead of solving it again
                # (the constrained-layout solve is about a fifth of a figure's rendering time).
                fig.set_layout_engine("none")
        for tmp, target in zip(temps, targets):
            os.replace(tmp, target)
    finally:
        if engine is not None and fig.get_layout_engine() is not engine:
            fig.set_layout_engine(engine)
        for tmp in temps:
            try:
                tmp.unlink()
            except FileNotFoundError:
                pass
    return targets


def _finish(fig: Figure, path: PathLike | None) -> Figure:
    if path is not None:
        save_figure(fig, path)
    return fig


# --------------------------------------------------------------------------------------------------
# input normalisation
# --------------------------------------------------------------------------------------------------


def _to_numpy(x: Any, name: str) -> np.ndarray:
    """Accept torch tensors (any device/dtype), numpy arrays and nested lists as float arrays."""
    if hasattr(x, "detach"):  # torch.Tensor without importing torch
        # double() also covers bool/int masks and bfloat16, which numpy cannot take directly.
        x = x.detach().cpu().double().numpy()
    try:
        arr = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be numeric, got {type(x).__name__}") from exc
    return arr


def _matrix(x: Any, name: str, *, nonnegative: bool = False, allow_nan: bool = False) -> np.ndarray:
    arr = _to_numpy(x, name)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {tuple(arr.shape)}")
    if arr.size == 0:
        raise ValueError(f"{name} is empty (shape {tuple(arr.shape)})")
    finite = np.isfinite(arr)
    if not allow_nan and not finite.all():
        raise ValueError(f"{name} contains NaN or infinite values")
    if nonnegative and (arr[finite] < 0).any():
        raise ValueError(f"{name} must be non-negative, found minimum {arr[finite].min():g}")
    return arr


def _is_number(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if hasattr(v, "item") and getattr(v, "ndim", 1) == 0:  # numpy / torch scalars
        v = v.item()
    return isinstance(v, (int, float))


def _as_float(v: Any) -> float | None:
    """A finite float, or None for missing values (None / NaN) so they are skipped, not plotted."""
    if v is None or not _is_number(v):
        return None
    f = float(v.item() if hasattr(v, "item") else v)
    return f if math.isfinite(f) else None


def _check_rows(results: Any, name: str = "results") -> list[Mapping[str, Any]]:
    if isinstance(results, Mapping) or not isinstance(results, Sequence) or isinstance(results, str):
        raise ValueError(f"{name} must be a list of dict rows, got {type(results).__name__}")
    rows = list(results)
    if not rows:
        raise ValueError(f"{name} is empty: nothing to plot")
    for i, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ValueError(f"{name}[{i}] must be a dict, got {type(row).__name__}")
    return rows


def _infer_cases(rows: Sequence[Mapping[str, Any]], cases: Sequence[str] | None) -> list[str]:
    """Evaluation cases: the given ones (checked), else every numeric non-reserved key in row order."""
    if cases is not None:
        cases = [cases] if isinstance(cases, str) else list(cases)
        if not cases:
            raise ValueError("cases is empty")
        present = {k for row in rows for k in row}
        missing = [c for c in cases if c not in present]
        if missing:
            raise ValueError(f"cases not found in any row: {missing}")
        return cases
    found: list[str] = []
    for row in rows:
        for key, value in row.items():
            if key not in _RESERVED_KEYS and key not in found and _is_number(value):
                found.append(key)
    if not found:
        raise ValueError("results rows have no accuracy columns besides sparsity/seed")
    return found


def _full_for(full_accuracy: float | Mapping[str, float] | None, case: str) -> float | None:
    if full_accuracy is None:
        return None
    if isinstance(full_accuracy, Mapping):
        return _as_float(full_accuracy.get(case))
    value = _as_float(full_accuracy)
    if value is None:
        raise ValueError(f"full_accuracy must be a number or a {{case: accuracy}} dict, got {full_accuracy!r}")
    return value


def case_label(case: str, case_labels: Mapping[str, str] | None = None) -> str:
    """The display name of an evaluation set: ``case_labels``, then `CASE_LABELS`, then for every HANS subcase the
    same scheme, ``"<heuristic>: <subcase words>"`` (``lexical_overlap_ln_subject-object_swap`` ->
    ``"LO: subject-object swap"``); other names as given."""
    if case_labels and case in case_labels:
        return case_labels[case]
    if case in CASE_LABELS:
        return CASE_LABELS[case]
    match = _HANS_CASE.match(case)
    if match:
        return f"{_HEURISTIC_SHORT[match.group(1)]}: {match.group(3).replace('_', ' ')}"
    return case


def wrap_label(text: str, width: int) -> str:
    """Wrap at spaces and underscores only, never inside a word (a long word stays whole on its line)."""
    if len(text) <= width:
        return text
    lines, current = [], ""
    for token in re.split(r"(?<=[_ ])", text):   # each token ends at a space or an underscore
        if current and len((current + token).rstrip()) > width:
            lines.append(current.rstrip())
            current = token
        else:
            current += token
    lines.append(current.rstrip())
    return "\n".join(lines)


def _case_label(case: str, case_labels: Mapping[str, str] | None, width: int = 22) -> str:
    return wrap_label(case_label(case, case_labels), width)


def _fmt_value(v: float) -> str:
    if not math.isfinite(v):
        return "–"
    if float(v).is_integer():
        return str(int(v))
    return f"{v:.2g}"


def _text_color(cmap: Any, norm: Any, value: float) -> str:
    """Black or white, whichever reads better on the cell colour."""
    r, g, b, _ = cmap(norm(value))
    luminance = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "white" if luminance < 0.5 else "black"


def _annotate(ax: Axes, data: np.ndarray, cmap: Any, norm: Any, *, fmt: Any = _fmt_value,
              fontsize: float = 8, x0: float = 0.0, faint_zero: bool = False) -> None:
    for (i, j), v in np.ndenumerate(data):
        color = "0.6" if not math.isfinite(v) else _text_color(cmap, norm, v)
        if faint_zero and v == 0:
            color = "0.7"
        ax.text(x0 + j, i, fmt(v), ha="center", va="center", fontsize=fontsize, color=color)


def _percent_axis(axis: Any, values: np.ndarray) -> None:
    """Show fractions in [0, 1] as percentages; leave other scales alone."""
    mpl = _mpl()
    finite = values[np.isfinite(values)]
    if finite.size and finite.min() >= 0 and finite.max() <= 1:
        axis.set_major_formatter(mpl.ticker.PercentFormatter(xmax=1, decimals=None))


def _grid_shape(n: int, max_cols: int = 3) -> tuple[int, int]:
    cols = min(n, max_cols)
    return math.ceil(n / cols), cols
