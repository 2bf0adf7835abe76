"""Figures for heuristic-core analyses (head masks, frequencies, accuracies, ablations).

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
import secrets
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

__all__ = [
    "CASE_LABELS",
    "figure_paths",
    "save_figure",
    "plot_mask_grid",
    "plot_joint_frequency",
    "plot_accuracy_vs_sparsity",
    "plot_subnetwork_accuracies",
    "plot_ablation_table",
    "plot_effective_size",
    "plot_attention_pattern",
]

PathLike = str | os.PathLike

PNG_DPI = 150
_FORMATS = ("png", "pdf")

# Short display names used in the paper for the evaluation sets it reports; other case names are
# shown as given (wrapped at underscores). Override per call with ``case_labels=``.
CASE_LABELS: dict[str, str] = {
    "validation_matched": "MNLI-m",
    "validation_mismatched": "MNLI-mm",
    "mnli-matched": "MNLI-m",
    "mnli-mismatched": "MNLI-mm",
    "lexical_overlap_ln_subject-object_swap": "SO-Swap",
    "lexical_overlap_ln_preposition": "Prep",
    "constituent_cn_embedded_under_if": "Embed-If",
    "constituent_cn_embedded_under_verb": "Embed-Verb",
}

# Row keys that describe a run rather than an evaluation case.
_RESERVED_KEYS = frozenset({"sparsity", "seed", "step", "group", "target_sparsity", "achieved_sparsity"})


# --------------------------------------------------------------------------------------------------
# matplotlib access and saving
# --------------------------------------------------------------------------------------------------


def _mpl() -> Any:
    """Import matplotlib lazily so that plotting stays an optional extra."""
    try:
        import matplotlib
        import matplotlib.colors  # noqa: F401
        import matplotlib.figure  # noqa: F401
        import matplotlib.patches  # noqa: F401
        import matplotlib.ticker  # noqa: F401
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
    try:
        for target, fmt in zip(targets, _FORMATS):
            tmp = target.with_name(f".{target.name}.{secrets.token_hex(6)}.tmp")
            # os.open with 0o666 honours the umask, unlike tempfile.mkstemp (always 0600).
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            temps.append(tmp)
            with os.fdopen(fd, "wb") as fh:
                fig.savefig(fh, format=fmt, dpi=PNG_DPI, bbox_inches="tight")
                fh.flush()
                os.fsync(fh.fileno())
        for tmp, target in zip(temps, targets):
            os.replace(tmp, target)
    finally:
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


def _case_label(case: str, case_labels: Mapping[str, str] | None, width: int = 22) -> str:
    if case_labels and case in case_labels:
        return case_labels[case]
    if case in CASE_LABELS:
        return CASE_LABELS[case]
    if len(case) <= width:
        return case
    # Wrap at underscores so long HANS subcase names stay readable as tick labels / titles.
    return "\n".join(textwrap.wrap(case.replace("_", "_\u200b"), width=width)).replace("\u200b", "")


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


# --------------------------------------------------------------------------------------------------
# head masks and frequencies
# --------------------------------------------------------------------------------------------------


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
    mlp_col = None
    if mlp is not None:
        mlp_arr = _to_numpy(mlp, "mlp").reshape(-1)
        if mlp_arr.shape != (num_layers,):
            raise ValueError(f"mlp must have one value per layer ({num_layers}), got shape {tuple(mlp_arr.shape)}")
        if not np.isfinite(mlp_arr).all() or (mlp_arr < 0).any():
            raise ValueError("mlp must contain finite non-negative values")
        mlp_col = mlp_arr[:, None]
    values = data if mlp_col is None else np.concatenate([data.ravel(), mlp_col.ravel()])

    binary = num_masks is None and bool(np.isin(values, (0.0, 1.0)).all())
    if num_masks is not None:
        if num_masks <= 0:
            raise ValueError(f"num_masks must be positive, got {num_masks}")
        if values.max() > num_masks:
            raise ValueError(f"a unit is kept {values.max():g} times but num_masks is {num_masks}")

    if binary:
        cmap = mpl.colors.ListedColormap(["#e8e8e8", "#2b6cb0"])
        norm = mpl.colors.BoundaryNorm([-0.5, 0.5, 1.5], cmap.N)
    else:
        cmap = mpl.colormaps["viridis"]
        vmax = float(num_masks) if num_masks is not None else max(float(values.max()), 1.0)
        norm = mpl.colors.Normalize(vmin=0.0, vmax=vmax)

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
        ax_mlp.imshow(mlp_col, cmap=cmap, norm=norm, aspect="equal", interpolation="nearest")
        ax_mlp.set_xticks([0], ["MLP"])
        ax_mlp.set_yticks(range(num_layers))
        ax_mlp.tick_params(labelleft=False, labelsize=8)
        ax_mlp.set_yticks(np.arange(-0.5, num_layers), minor=True)
        ax_mlp.grid(which="minor", axis="y", color="white", linewidth=0.8)
        ax_mlp.tick_params(which="minor", length=0)
        if not binary:
            _annotate(ax_mlp, mlp_col, cmap, norm, fontsize=fontsize)

    axes = [ax] if ax_mlp is None else [ax, ax_mlp]
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
    if title:
        fig.suptitle(title)
    return _finish(fig, path)


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


# --------------------------------------------------------------------------------------------------
# accuracies of subnetworks
# --------------------------------------------------------------------------------------------------


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
        if not groups:
            ax.text(0.5, 0.5, "no data", transform=ax.transAxes, ha="center", va="center", color="0.5")
        else:
            xs = np.array(sorted(groups))
            means = np.array([np.mean(groups[x]) for x in xs])
            stds = np.array([np.std(groups[x]) for x in xs])
            ax.fill_between(xs, means - stds, means + stds, color=color, alpha=0.2, lw=0, label="± std")
            ax.plot(xs, means, "-", color=color, lw=1.6, label="mean over seeds")
            px = np.concatenate([[x] * len(groups[x]) for x in xs])
            py = np.concatenate([groups[x] for x in xs])
            ax.scatter(px, py, s=10, color=color, alpha=0.55, edgecolors="none", label="seed", zorder=3)
        full = _full_for(full_accuracy, case)
        if full is not None:
            ax.axhline(full, ls="--", color="0.25", lw=1.1, label="full model")
        ax.set_title(_case_label(case, case_labels, width=32), fontsize=9)
        ax.grid(alpha=0.3)
        ax.tick_params(labelsize=8)
        _percent_axis(ax.yaxis, np.array([a for g in groups.values() for a in g] + ([full] if full is not None else [])))
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
            center = ci - slot / 2 + sub * (gi + 0.5)
            color = colors[gi % len(colors)]
            label = None
            if sp not in labelled:
                labelled.add(sp)
                label = _sparsity_label(sp, sparsities) if n_groups > 1 else "subnetwork"
            if kind == "violin" and len(accs) > 1 and np.ptp(accs) > 0:
                parts = ax.violinplot([accs], positions=[center], widths=sub * 0.9, showextrema=False)
                for body in parts["bodies"]:
                    body.set_facecolor(color)
                    body.set_alpha(0.35)
                jitter = 0.0
            else:
                jitter = sub * 0.3
            xs = center + rng.uniform(-jitter, jitter, size=len(accs))
            ax.scatter(xs, accs, s=14, color=color, alpha=0.75, edgecolors="none", zorder=3, label=label)
        full = _full_for(full_accuracy, case)
        if full is not None:
            ax.hlines(full, ci - slot / 2, ci + slot / 2, colors="black", lw=2.0, zorder=4,
                      label=None if full_label_done else "full model")
            full_label_done = True
    ax.set_xticks(range(len(cases)))
    many = len(cases) > 6
    labels = [_case_label(c, case_labels, width=40 if many else 16) for c in cases]
    if many:
        labels = [lab.replace("\n", "") for lab in labels]
    ax.set_xticklabels(labels, rotation=55 if many else 0, ha="right" if many else "center",
                       rotation_mode="anchor", fontsize=7 if many else 8)
    ax.set_xlim(-0.6, len(cases) - 0.4)
    ax.set_ylabel("accuracy")
    _percent_axis(ax.yaxis, np.array([a for g in per_case.values() for v in g.values() for a in v]))
    ax.grid(axis="y", alpha=0.3)
    for x in np.arange(0.5, len(cases) - 1):
        ax.axvline(x, color="0.9", lw=0.8, zorder=0)
    title = "Subnetwork accuracy per evaluation set"
    if n_groups == 1 and sparsities[0] is not None:
        title += f" ({_sparsity_label(sparsities[0], sparsities)})"
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="best", framealpha=0.85)
    return _finish(fig, path)


# --------------------------------------------------------------------------------------------------
# ablations, effective size, attention
# --------------------------------------------------------------------------------------------------


def plot_ablation_table(
    table: Mapping[str, Mapping[str, float]],
    path: PathLike | None = None,
    *,
    case_labels: Mapping[str, str] | None = None,
    fmt: str = "+.3g",
) -> Figure:
    """Heatmap of accuracy changes from ablations (the paper's Table 3 as a picture).

    ``table`` is ``{row_label: {case: delta}}`` with rows such as ``"L4.H0"`` or
    ``"L2.H5 + L3.H7 + L4.H0"``. The diverging colormap is centred at 0 (red = accuracy drops,
    blue = rises) with symmetric limits, so colour intensity compares across cells. Missing cells
    are left blank and marked "–". Values are annotated with ``format(delta, fmt)``.
    """
    mpl = _mpl()
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
    finite = data[np.isfinite(data)]
    if finite.size == 0:
        raise ValueError("table has no numeric values")
    limit = float(np.abs(finite).max()) or 1.0
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
    cbar = fig.colorbar(im, ax=ax, shrink=0.85, pad=0.02)
    cbar.set_label("accuracy change")
    return _finish(fig, path)


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
