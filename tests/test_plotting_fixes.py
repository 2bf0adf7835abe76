"""The figure problems of issue 14, each checked on the drawn axes: bands and limits inside 0-100%, one subcase
naming and no label broken inside a word, the ablation table in points with its colour scale set by measured rows,
effective-size lines that stay visible when equal and a title that names a band only when one is drawn, and a
subnetwork-accuracy legend outside the axes."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest

from hf_heuristic_core import plotting as P

HANS = ["lexical_overlap_ln_subject-object_swap", "constituent_cn_embedded_under_if", "constituent_cn_adverb",
        "subsequence_sn_relative_clause_on_subject", "subsequence_sn_NP-S"]


def _rows() -> list[dict]:
    """Seeds spread so that mean +- std leaves [0, 1] (0.0/0.0/0.9 and 1.0/1.0/0.2)."""
    rows = []
    for sparsity in (0.5, 0.7):
        for seed, (low, high) in enumerate([(0.0, 1.0), (0.0, 1.0), (0.9, 0.2)]):
            rows.append({"sparsity": sparsity, "seed": seed, "id": high, HANS[0]: low, HANS[3]: low})
    return rows


def _words(label: str) -> set[str]:
    return {w for w in label.replace("\n", " ").split(" ") if w}


def test_accuracy_bands_and_limits_stay_inside_0_100_percent():
    fig = P.plot_accuracy_vs_sparsity(_rows(), {"id": 1.0, HANS[0]: 0.0, HANS[3]: 0.02})
    for ax in fig.axes:
        low, high = ax.get_ylim()
        assert 0.0 <= low < high <= 1.0, (ax.get_title(), low, high)
        band = ax.collections[0].get_paths()[0].vertices[:, 1]
        assert band.min() >= 0.0 and band.max() <= 1.0


def test_subcase_titles_use_one_naming_and_never_break_inside_a_word():
    fig = P.plot_accuracy_vs_sparsity(_rows(), cases=["id", HANS[0], HANS[3]])
    titles = [ax.get_title() for ax in fig.axes]
    assert titles[1] == "LO: subject-object swap"
    assert _words(titles[2]) == {"Sub:", "relative", "clause", "on", "subject"}   # wrapped between words only
    labels = [P.case_label(case) for case in HANS]
    assert labels == ["LO: subject-object swap", "Const: embedded under if", "Const: adverb",
                      "Sub: relative clause on subject", "Sub: NP-S"]
    assert P.case_label("validation_matched") == "MNLI-m"


def test_ablation_table_in_points_with_scale_from_measured_rows_and_whole_word_headers():
    table = {"L1.H1": {"id": -0.037, HANS[0]: 0.317, HANS[3]: 0.267},
             "L0.MLP": {"id": -0.47, HANS[0]: 1.0, HANS[3]: 0.983},
             "L1.H1 + L0.MLP": {"id": -0.5, HANS[0]: 1.0, HANS[3]: 0.95},
             "sum of singles (L1.H1 + L0.MLP)": {"id": -0.507, HANS[0]: 1.317, HANS[3]: 1.25}}
    fig = P.plot_ablation_table(table)
    ax, colorbar = fig.axes
    texts = {t.get_text() for t in ax.texts}
    assert {"-3.7", "+31.7", "+100.0", "+131.7"} <= texts          # points, as in report.md
    norm = ax.images[0].norm
    assert norm.vmax == pytest.approx(100.0) and norm.vmin == pytest.approx(-100.0)   # not 131.7 from the sum row
    assert colorbar.get_ylabel() == "accuracy change (points)"
    headers = [t.get_text() for t in ax.get_xticklabels()]
    assert headers[1] == "LO:\nsubject-object\nswap"
    assert all(line.split(" ")[0] not in ("", "-") for h in headers for line in h.split("\n"))


def _records(seeds: int) -> list[dict]:
    rows = []
    for step in (40, 80, 120):
        for seed in range(seeds):
            ood = 0.3 + 0.1 * seed * (step == 80)
            for group, size in (("ID", 0.2), ("OOD", ood), ("mixed", ood)):   # OOD equals mixed
                rows.append({"step": step, "seed": seed, "group": group, "effective_size": size,
                             "full_accuracy": 0.9})
    return rows


def test_equal_ood_and_mixed_lines_are_both_visible_and_title_names_a_band_only_when_drawn():
    fig = P.plot_effective_size(_records(seeds=1))
    ax_size = fig.axes[0]
    lines = {line.get_label(): line for line in ax_size.lines}
    ood, mixed = lines["OOD"], lines["mixed"]
    np.testing.assert_allclose(ood.get_ydata(), mixed.get_ydata())
    assert (ood.get_marker(), ood.get_linestyle()) != (mixed.get_marker(), mixed.get_linestyle())
    assert ood.get_markersize() > mixed.get_markersize() and ood.get_linewidth() > mixed.get_linewidth()
    assert not ax_size.collections and "band" not in ax_size.get_title()

    fig = P.plot_effective_size(_records(seeds=3))
    ax_size = fig.axes[0]
    assert "band: min–max over seeds" in ax_size.get_title() and ax_size.collections


def test_effective_size_draws_given_min_max_bands():
    bands = {"ID": {"step": [40, 80], "mean": [0.3, 0.4], "min": [0.2, 0.4], "max": [0.5, 0.4]}}
    fig = P.plot_effective_size(_records(seeds=1), groups=["ID", "OOD"], bands=bands)
    ax_size = fig.axes[0]
    np.testing.assert_allclose(ax_size.lines[0].get_ydata(), [0.3, 0.4])
    band = ax_size.collections[0].get_paths()[0].vertices[:, 1]
    assert band.min() == pytest.approx(0.2) and band.max() == pytest.approx(0.5)
    assert "band: min–max over seeds" in ax_size.get_title()
    with pytest.raises(ValueError, match="bands\\['ID'\\] needs 1-D"):
        P.plot_effective_size(_records(seeds=1), bands={"ID": {"step": [1, 2], "mean": [1], "min": [1], "max": [1]}})


def test_subnetwork_accuracies_legend_sits_outside_the_axes():
    fig = P.plot_subnetwork_accuracies(_rows(), {"id": 1.0, HANS[0]: 0.0, HANS[3]: 0.02})
    (ax,) = fig.axes
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    axes_box = ax.get_window_extent()
    assert legend.y0 >= axes_box.y1 - 1   # above the plotting area, so it covers no bar or dot
