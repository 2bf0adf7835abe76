"""Tests for hf_heuristic_core.plotting: saved files, figure contents and input validation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")
torch = pytest.importorskip("torch")

from hf_heuristic_core import plotting as P  # noqa: E402

DATA_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "heuristic-core-eval"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_saved(stem: Path) -> None:
    png, pdf = stem.with_name(stem.name + ".png"), stem.with_name(stem.name + ".pdf")
    assert png.is_file() and png.stat().st_size > 0
    assert pdf.is_file() and pdf.stat().st_size > 0
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert pdf.read_bytes()[:5] == b"%PDF-"
    leftovers = [p.name for p in stem.parent.iterdir() if p.name.endswith(".tmp")]
    assert not leftovers


def texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def scatters(ax) -> list:
    from matplotlib.collections import PathCollection

    return [c for c in ax.collections if isinstance(c, PathCollection)]


def full_model_bars(ax) -> list:
    from matplotlib.collections import LineCollection

    return [seg for c in ax.collections if isinstance(c, LineCollection) for seg in c.get_segments()]


def image_data(ax) -> np.ndarray:
    return np.ma.filled(np.ma.asarray(ax.images[0].get_array()).astype(float), np.nan)


# --------------------------------------------------------------------------------------------------
# saving
# --------------------------------------------------------------------------------------------------


def test_figure_paths_strip_only_figure_suffixes(tmp_path):
    expected = [tmp_path / "fig.png", tmp_path / "fig.pdf"]
    assert P.figure_paths(tmp_path / "fig") == expected
    assert P.figure_paths(tmp_path / "fig.png") == expected
    assert P.figure_paths(str(tmp_path / "fig.PDF")) == expected
    assert P.figure_paths(tmp_path / "run.v2") == [tmp_path / "run.v2.png", tmp_path / "run.v2.pdf"]


def test_save_figure_replaces_existing_files_without_leftovers(tmp_path):
    (tmp_path / "fig.png").write_bytes(b"old png")
    (tmp_path / "fig.pdf").write_bytes(b"old pdf")
    fig = P.plot_attention_pattern(np.eye(3), ["a", "b", "c"])
    saved = P.save_figure(fig, tmp_path / "fig.png")
    assert saved == [tmp_path / "fig.png", tmp_path / "fig.pdf"]
    assert_saved(tmp_path / "fig")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.pdf", "fig.png"]


def test_save_figure_failure_keeps_old_files(tmp_path, monkeypatch):
    (tmp_path / "fig.png").write_bytes(b"old png")
    (tmp_path / "fig.pdf").write_bytes(b"old pdf")
    fig = P.plot_attention_pattern(np.eye(2), ["a", "b"])
    real_savefig = fig.savefig

    def failing_savefig(fh, format, **kwargs):
        if format == "pdf":
            fh.write(b"%PDF-half")
            raise RuntimeError("disk full")
        return real_savefig(fh, format=format, **kwargs)

    monkeypatch.setattr(fig, "savefig", failing_savefig)
    with pytest.raises(RuntimeError, match="disk full"):
        P.save_figure(fig, tmp_path / "fig")
    assert (tmp_path / "fig.png").read_bytes() == b"old png"
    assert (tmp_path / "fig.pdf").read_bytes() == b"old pdf"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.pdf", "fig.png"]


def test_save_figure_lays_out_once_and_gives_the_figure_back_as_it_was(tmp_path, monkeypatch):
    """The PDF reuses the layout the PNG solved (no second constrained-layout solve), and the figure keeps its
    layout engine afterwards, also when saving fails."""
    fig = P.plot_attention_pattern(np.eye(3), ["a", "b", "c"])
    engine = fig.get_layout_engine()
    assert engine is not None
    seen = []
    real_savefig = fig.savefig

    def recording_savefig(fh, format, **kwargs):
        seen.append((format, fig.get_layout_engine()))
        result = real_savefig(fh, format=format, **kwargs)
        seen.append((format, [tuple(ax.get_position().bounds) for ax in fig.axes]))
        return result

    monkeypatch.setattr(fig, "savefig", recording_savefig)
    P.save_figure(fig, tmp_path / "fig")
    (png, png_engine), (_, png_layout), (pdf, pdf_engine), (_, pdf_layout) = seen
    assert (png, pdf) == ("png", "pdf") and png_engine is engine
    assert type(pdf_engine).__name__ == "PlaceHolderLayoutEngine"   # matplotlib's "none" once an engine was set
    assert pdf_layout == png_layout                                  # the PDF has exactly the PNG's layout
    assert fig.get_layout_engine() is engine
    assert_saved(tmp_path / "fig")

    def failing_savefig(fh, format, **kwargs):
        if format == "pdf":
            raise RuntimeError("disk full")
        return real_savefig(fh, format=format, **kwargs)

    monkeypatch.setattr(fig, "savefig", failing_savefig)
    with pytest.raises(RuntimeError, match="disk full"):
        P.save_figure(fig, tmp_path / "again")
    assert fig.get_layout_engine() is engine


def test_save_figure_creates_parent_folders(tmp_path):
    fig = P.plot_attention_pattern(np.eye(2), ["a", "b"])
    P.save_figure(fig, tmp_path / "a" / "b" / "fig")
    assert_saved(tmp_path / "a" / "b" / "fig")


def test_no_pyplot_global_state(tmp_path):
    # A fresh interpreter, so other tests importing pyplot cannot mask a regression.
    code = (
        "import sys, numpy as np; from hf_heuristic_core import plotting as P; "
        f"P.plot_mask_grid(np.eye(3), path={str(tmp_path / 'fig')!r}); "
        "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot was imported'"
    )
    root = Path(__file__).resolve().parents[1]
    subprocess.run([sys.executable, "-c", code], check=True, cwd=root,
                   env={**os.environ, "PYTHONPATH": os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")])})
    assert_saved(tmp_path / "fig")


def test_missing_matplotlib_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"hf_heuristic_core\[plot\]"):
        P.plot_mask_grid(np.ones((2, 2)))


# --------------------------------------------------------------------------------------------------
# mask grid
# --------------------------------------------------------------------------------------------------


def test_mask_grid_binary_with_mlp(tmp_path):
    mask = torch.tensor([[1, 0, 1], [0, 0, 1]], dtype=torch.bool)
    fig = P.plot_mask_grid(mask, title="one mask", mlp=torch.tensor([1.0, 0.0]), path=tmp_path / "fig")
    assert_saved(tmp_path / "fig")
    ax, ax_mlp = fig.axes  # no colorbar for a 0/1 mask
    np.testing.assert_array_equal(image_data(ax), mask.numpy().astype(float))
    np.testing.assert_array_equal(image_data(ax_mlp), [[1.0], [0.0]])
    assert ax.get_xlabel() == "head" and ax.get_ylabel() == "layer"
    assert [t.get_text() for t in ax_mlp.get_xticklabels()] == ["MLP"]
    assert texts(ax) == []
    assert fig._suptitle.get_text() == "one mask"
    legend_texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend_texts == ["kept", "pruned"]


def test_mask_grid_frequency_annotates_counts(tmp_path):
    freq = np.array([[12, 0, 3], [7, 12, 1]])
    fig = P.plot_mask_grid(freq, num_masks=12, path=tmp_path / "fig")
    assert_saved(tmp_path / "fig")
    ax, cbar_ax = fig.axes
    np.testing.assert_array_equal(image_data(ax), freq)
    assert sorted(texts(ax)) == sorted(str(v) for v in freq.ravel())
    assert cbar_ax.get_ylabel() == "kept by N of 12 masks"
    assert ax.images[0].norm.vmax == 12


def test_mask_grid_frequency_with_mlp_column():
    fig = P.plot_mask_grid(np.array([[2.0, 1.0], [0.0, 3.0]]), num_masks=3, mlp=[3, 1])
    ax, ax_mlp, cbar_ax = fig.axes
    assert texts(ax_mlp) == ["3", "1"]
    assert ax.images[0].norm is ax_mlp.images[0].norm  # same colour scale for heads and MLPs


def test_mask_grid_non_binary_without_num_masks_is_frequency():
    fig = P.plot_mask_grid([[0, 2], [5, 1]])
    assert fig.axes[-1].get_ylabel() == "kept by N masks"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"mask_or_frequency": np.ones(4)}, "2-D"),
        ({"mask_or_frequency": np.ones((2, 0))}, "empty"),
        ({"mask_or_frequency": -np.ones((2, 2))}, "non-negative"),
        ({"mask_or_frequency": np.full((2, 2), 5), "num_masks": 4}, "num_masks"),
        ({"mask_or_frequency": np.ones((2, 2)), "mlp": [1, 1, 1]}, "one value per layer"),
        ({"mask_or_frequency": [["a", "b"]]}, "numeric"),
    ],
)
def test_mask_grid_rejects_bad_input(kwargs, message):
    with pytest.raises(ValueError, match=message):
        P.plot_mask_grid(**kwargs)


# --------------------------------------------------------------------------------------------------
# joint frequency
# --------------------------------------------------------------------------------------------------


def test_joint_frequency(tmp_path):
    joint = np.array([[50, 3, 0], [2, 10, 1], [0, 4, 2]])
    fig = P.plot_joint_frequency(joint, rho=0.82, p_value=1.6e-36, path=tmp_path / "fig.pdf")
    assert_saved(tmp_path / "fig")
    ax, cbar_ax = fig.axes
    np.testing.assert_array_equal(image_data(ax), joint)
    assert not np.ma.is_masked(ax.images[0].get_array())  # zeros stay drawn, not blanked by a log scale
    assert ax.images[0].norm(0) == 0 and 0 < ax.images[0].norm(1) < ax.images[0].norm(50)
    assert sorted(texts(ax)) == sorted(str(v) for v in joint.ravel())
    title = ax.get_title()
    assert "ρ = 0.82" in title and "p = 1.6e-36" in title
    assert "50% sparsity" in ax.get_ylabel() and "70% sparsity" in ax.get_xlabel()
    assert "of 2 subnetworks" in ax.get_ylabel()


def test_joint_frequency_without_stats_has_plain_title():
    fig = P.plot_joint_frequency(torch.ones(2, 3), label_a="A", label_b="B")
    assert fig.axes[0].get_title() == "Head frequency: A vs B"


@pytest.mark.parametrize("bad", [np.arange(5), np.array([[1, -1], [0, 0]]), np.array([[np.nan, 1], [0, 0]])])
def test_joint_frequency_rejects_bad_input(bad):
    with pytest.raises(ValueError):
        P.plot_joint_frequency(bad)


# --------------------------------------------------------------------------------------------------
# accuracy vs sparsity
# --------------------------------------------------------------------------------------------------


def _sparsity_rows() -> list[dict]:
    rows = []
    for sp, base in ((0.1, 0.8), (0.3, 0.7), (0.5, 0.5)):
        for seed, noise in ((1, -0.02), (2, 0.0), (3, 0.02)):
            rows.append({"sparsity": sp, "seed": seed, "id": base + noise, "ood": base / 2 + noise})
    return rows


def test_accuracy_vs_sparsity(tmp_path):
    rows = _sparsity_rows()
    fig = P.plot_accuracy_vs_sparsity(rows, full_accuracy={"id": 0.82, "ood": 0.45}, path=tmp_path / "fig")
    assert_saved(tmp_path / "fig")
    assert len(fig.axes) == 2
    for ax, case, full in zip(fig.axes, ("id", "ood"), (0.82, 0.45)):
        assert ax.get_title() == case
        mean_line, full_line = ax.lines
        np.testing.assert_allclose(mean_line.get_xdata(), [0.1, 0.3, 0.5])
        expected = [np.mean([r[case] for r in rows if r["sparsity"] == sp]) for sp in (0.1, 0.3, 0.5)]
        np.testing.assert_allclose(mean_line.get_ydata(), expected)
        assert full_line.get_linestyle() == "--"
        np.testing.assert_allclose(full_line.get_ydata(), [full, full])
        assert len(ax.collections[-1].get_offsets()) == 9  # every seed as a dot
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["± std", "mean over seeds", "seed", "full model"]


def test_accuracy_vs_sparsity_selected_case_and_missing_values():
    rows = _sparsity_rows() + [{"sparsity": 0.7, "seed": 1, "id": None, "ood": float("nan")}]
    fig = P.plot_accuracy_vs_sparsity(rows, full_accuracy=0.8, cases=["ood"])
    assert len(fig.axes) == 1
    np.testing.assert_allclose(fig.axes[0].lines[0].get_xdata(), [0.1, 0.3, 0.5])


@pytest.mark.parametrize(
    "results, kwargs, message",
    [
        ([], {}, "empty"),
        ({"sparsity": [0.5]}, {}, "list of dict rows"),
        ([{"seed": 1, "id": 0.5}], {}, "sparsity"),
        (_sparsity_rows(), {"cases": ["nope"]}, "not found"),
        ([{"sparsity": 0.5, "seed": 1}], {}, "no accuracy columns"),
    ],
)
def test_accuracy_vs_sparsity_rejects_bad_input(results, kwargs, message):
    with pytest.raises(ValueError, match=message):
        P.plot_accuracy_vs_sparsity(results, **kwargs)


# --------------------------------------------------------------------------------------------------
# subnetwork accuracies (Figure 2)
# --------------------------------------------------------------------------------------------------


def test_subnetwork_accuracies_groups_by_sparsity(tmp_path):
    rows = [{"sparsity": sp, "seed": s, "validation_matched": 0.8 - sp / 10 + s / 100, "hans": 0.1 * s}
            for sp in (0.5, 0.7) for s in range(4)]
    fig = P.plot_subnetwork_accuracies(rows, {"validation_matched": 0.83, "hans": 0.6}, path=tmp_path / "fig")
    assert_saved(tmp_path / "fig")
    (ax,) = fig.axes
    assert [t.get_text() for t in ax.get_xticklabels()] == ["MNLI-m", "hans"]
    assert sum(len(c.get_offsets()) for c in scatters(ax)) == 16
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["50% sparsity", "70% sparsity", "full model"]
    bars = full_model_bars(ax)
    assert len(bars) == 2  # one per case
    np.testing.assert_allclose(sorted(seg[0][1] for seg in bars), [0.6, 0.83])


def test_subnetwork_accuracies_violin_and_bad_kind():
    rows = [{"seed": s, "a": 0.1 * s} for s in range(5)]
    fig = P.plot_subnetwork_accuracies(rows, 0.5, kind="violin")
    from matplotlib.collections import PolyCollection

    assert any(isinstance(c, PolyCollection) for c in fig.axes[0].collections)
    with pytest.raises(ValueError, match="kind"):
        P.plot_subnetwork_accuracies(rows, 0.5, kind="box")
    with pytest.raises(ValueError, match="empty"):
        P.plot_subnetwork_accuracies([], 0.5)


@pytest.mark.skipif(not (DATA_DIR / "mnli-sp50.json").is_file(), reason="shared heuristic-core data absent")
def test_subnetwork_accuracies_on_released_mnli_sp50(tmp_path):
    # Column table {"seed": [...], "sparsity": [...], case: [...]}; column 0 is the full model.
    table = json.loads((DATA_DIR / "mnli-sp50.json").read_text())
    cases = [k for k in table if k not in ("seed", "sparsity")]
    assert table["seed"][0] == "original"
    full = {c: table[c][0] for c in cases}
    # Achieved sparsities differ per seed (0.4551, 0.5, ...); group them under the nominal 50%.
    rows = [{"seed": seed, "sparsity": 0.5, **{c: table[c][i] for c in cases}}
            for i, seed in enumerate(table["seed"]) if seed != "original"]
    assert len(rows) == 12
    fig = P.plot_subnetwork_accuracies(rows, full, path=tmp_path / "fig")
    assert_saved(tmp_path / "fig")
    (ax,) = fig.axes
    assert sum(len(c.get_offsets()) for c in scatters(ax)) == 12 * len(cases)
    bars = full_model_bars(ax)
    assert len(bars) == len(cases)
    np.testing.assert_allclose([seg[0][1] for seg in bars], [full[c] for c in cases])
    assert len(ax.get_xticklabels()) == len(cases)
    assert "50% sparsity" in ax.get_title()
    # The paper's point: ID stays near the full model, Embed-If scatters (4.1% .. 50.2%).
    embed_if = [r["constituent_cn_embedded_under_if"] for r in rows]
    assert min(embed_if) == pytest.approx(0.041, abs=1e-3) and max(embed_if) == pytest.approx(0.502, abs=1e-3)


# --------------------------------------------------------------------------------------------------
# ablation table
# --------------------------------------------------------------------------------------------------


def test_ablation_table(tmp_path):
    table = {
        "L4.H0": {"MNLI-m": -0.4, "SO-Swap": -41.3},
        "L2.H5 + L3.H7 + L4.H0": {"MNLI-m": -2.9, "SO-Swap": -83.1, "Prep": -62.4},
        "average non-core head": {"MNLI-m": -0.1, "SO-Swap": 0.5},
    }
    fig = P.plot_ablation_table(table, path=tmp_path / "fig", scale=1.0, fmt="+.3g")   # already in points
    assert_saved(tmp_path / "fig")
    ax, cbar_ax = fig.axes
    expected = np.array([[-0.4, -41.3, np.nan], [-2.9, -83.1, -62.4], [-0.1, 0.5, np.nan]])
    np.testing.assert_array_equal(image_data(ax), expected)
    norm = ax.images[0].norm
    assert norm.vmin == -norm.vmax == -83.1  # centred at zero
    assert [t.get_text() for t in ax.get_yticklabels()] == list(table)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["MNLI-m", "SO-Swap", "Prep"]
    assert {"-41.3", "+0.5", "–", "-83.1"} <= set(texts(ax))
    assert cbar_ax.get_ylabel() == "accuracy change"


@pytest.mark.parametrize("bad", [{}, {"L0.H0": {}}, {"L0.H0": [1, 2]}, {"L0.H0": {"a": "x"}}, [("a", 1)]])
def test_ablation_table_rejects_bad_input(bad):
    with pytest.raises(ValueError):
        P.plot_ablation_table(bad)


# --------------------------------------------------------------------------------------------------
# effective size
# --------------------------------------------------------------------------------------------------


def _effective_records() -> list[dict]:
    recs = []
    for step in (500, 6500, 12500):
        for seed in (1, 2, 3):
            recs.append({"step": step, "seed": seed, "group": "ID", "effective_size": 0.5 + 0.01 * seed,
                         "full_accuracy": 0.8})
            recs.append({"step": step, "seed": seed, "group": "OOD", "effective_size": 0.3 + step / 50000,
                         "full_accuracy": 0.1 + step / 50000})
    return recs


def test_effective_size(tmp_path):
    fig = P.plot_effective_size(_effective_records(), path=tmp_path / "fig")
    assert_saved(tmp_path / "fig")
    ax_size, ax_acc = fig.axes
    assert ax_size.get_shared_x_axes().joined(ax_size, ax_acc)
    assert ax_size.get_ylabel() == "effective size" and ax_acc.get_xlabel() == "fine-tuning step"
    assert len(ax_size.lines) == len(ax_acc.lines) == 2
    np.testing.assert_allclose(ax_size.lines[0].get_ydata(), [0.52, 0.52, 0.52])
    np.testing.assert_allclose(ax_size.lines[0].get_xdata(), [500, 6500, 12500])
    assert [t.get_text() for t in ax_size.get_legend().get_texts()] == ["ID", "OOD"]
    assert "min–max" in ax_size.get_title()


def test_effective_size_group_subset_std_and_seedless_full_accuracy():
    recs = [r for r in _effective_records() if r["group"] == "OOD"]
    for r in recs:
        r.pop("full_accuracy")
    recs.append({"step": 500, "seed": None, "group": "OOD", "full_accuracy": 0.2})
    fig = P.plot_effective_size(recs, groups=["OOD"], spread="std")
    ax_size, ax_acc = fig.axes
    assert len(ax_size.lines) == 1 and len(ax_acc.lines) == 1
    np.testing.assert_allclose(ax_acc.lines[0].get_ydata(), [0.2])
    assert "band" not in ax_size.get_title()   # the OOD seeds agree at every step: no band is drawn


@pytest.mark.parametrize(
    "records, kwargs, message",
    [
        ([], {}, "empty"),
        ([{"seed": 1, "group": "ID", "effective_size": 0.5}], {}, "step"),
        (_effective_records(), {"groups": ["mixed"]}, "not found"),
        (_effective_records(), {"spread": "iqr"}, "spread"),
        ([{"step": 1, "group": "ID"}], {}, "no numeric"),
    ],
)
def test_effective_size_rejects_bad_input(records, kwargs, message):
    with pytest.raises(ValueError, match=message):
        P.plot_effective_size(records, **kwargs)


# --------------------------------------------------------------------------------------------------
# attention pattern
# --------------------------------------------------------------------------------------------------


def test_attention_pattern(tmp_path):
    tokens = ["[CLS]", "the", "cat", "[SEP]"]
    att = torch.softmax(torch.arange(16.0).reshape(4, 4), dim=-1).to(torch.bfloat16)
    fig = P.plot_attention_pattern(att, tokens, title="L4.H0", path=tmp_path / "fig")
    assert_saved(tmp_path / "fig")
    ax, cbar_ax = fig.axes
    np.testing.assert_allclose(image_data(ax), att.double().numpy())
    assert [t.get_text() for t in ax.get_xticklabels()] == tokens
    assert [t.get_text() for t in ax.get_yticklabels()] == tokens
    assert ax.get_title() == "L4.H0"
    assert ax.images[0].norm.vmin == 0
    assert cbar_ax.get_ylabel() == "attention weight"


@pytest.mark.parametrize(
    "attention, tokens, message",
    [
        (np.ones((2, 3)), ["a", "b"], "square"),
        (np.ones((1, 2, 2)), ["a", "b"], "2-D"),
        (np.ones((2, 2)), ["a"], "tokens"),
    ],
)
def test_attention_pattern_rejects_bad_input(attention, tokens, message):
    with pytest.raises(ValueError, match=message):
        P.plot_attention_pattern(attention, tokens)
