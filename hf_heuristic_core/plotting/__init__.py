"""Figures for heuristic-core analyses (head masks, frequencies, accuracies, ablations, effective size, attention).

Every ``plot_*`` function takes plain data (torch tensors, numpy arrays, lists, dicts), builds a standalone
:class:`matplotlib.figure.Figure` (no pyplot, so nothing leaks into a global figure registry and any backend works,
including headless ``Agg``) and returns it. When ``path`` is given the figure is also written as ``<stem>.png``
(150 dpi) and ``<stem>.pdf``; see :func:`save_figure` and :func:`figure_paths`.

One module per figure family (`masks`, `accuracy`, `ablation`, `effective_size`, `attention`, `subtasks`, `circuits`)
over shared plumbing (`_base`). matplotlib is an optional dependency (``pip install hf_heuristic_core[plot]``),
imported only when a function here is called.
"""

from __future__ import annotations

from ._base import CASE_LABELS, PNG_DPI, case_label, figure_paths, save_figure
from .ablation import plot_ablation_table
from .accuracy import plot_accuracy_vs_sparsity, plot_subnetwork_accuracies
from .attention import plot_attention_pattern
from .circuits import plot_faithfulness_curves
from .effective_size import plot_effective_size
from .masks import plot_joint_frequency, plot_mask_grid
from .subtasks import plot_sharing_bars, plot_subtask_differences

__all__ = [
    "CASE_LABELS",
    "PNG_DPI",
    "case_label",
    "figure_paths",
    "plot_ablation_table",
    "plot_accuracy_vs_sparsity",
    "plot_attention_pattern",
    "plot_effective_size",
    "plot_faithfulness_curves",
    "plot_joint_frequency",
    "plot_mask_grid",
    "plot_sharing_bars",
    "plot_subnetwork_accuracies",
    "plot_subtask_differences",
    "save_figure",
]
