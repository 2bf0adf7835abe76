"""The Subtask Induction reproduction's paired tests across sources, against hand-computed references, and its
defaults (the authors' transplant, dropout and discovery settings)."""

from __future__ import annotations

import math
import statistics

import pytest
from benchmark_scripts import load_script


@pytest.fixture(scope="module")
def repro():
    return load_script("reproductions/repro_subtask_induction")


def test_sign_test_exact_values(repro):
    # 5 of 5 positive: 2 * (1/32) = 0.0625; 4 of 5: 2 * (5 + 1)/32 = 0.375; 3 of 6 (one tie dropped from 7): 1.0.
    assert repro.sign_test([0.1, 0.2, 0.05, 0.3, 0.01]) == {"test": "exact sign test (two-sided)", "n": 5,
                                                            "positive": 5, "p": 0.0625}
    assert repro.sign_test([0.1, -0.2, 0.05, 0.3, 0.01])["p"] == pytest.approx(0.375)
    both = repro.sign_test([0.1, -0.2, 0.05, -0.3, 0.01, -0.1, 0.0])
    assert (both["n"], both["positive"], both["p"]) == (6, 3, 1.0)
    assert repro.sign_test([0.0, 0.0])["p"] == 1.0


def test_paired_t_test_matches_the_formula(repro):
    pytest.importorskip("scipy")
    sub, ctl = [0.60, 0.55, 0.70, 0.58, 0.62], [0.50, 0.52, 0.55, 0.60, 0.49]
    d = [a - b for a, b in zip(sub, ctl)]
    t = statistics.fmean(d) / (statistics.stdev(d) / math.sqrt(len(d)))
    out = repro.paired_tests(sub, ctl)
    assert out["n_sources"] == 5 and out["t_test"]["t"] == pytest.approx(t) and out["t_test"]["df"] == 4
    assert 0 < out["t_test"]["p"] < 0.1
    # Wilcoxon, exact for n = 5 without ties: d = .10, .03, .15, -.02, .13, ranks of |d| = 3, 2, 5, 1, 4; the
    # negative rank sum is 1 -> W = 1; P(W <= 1) = 2 of the 32 sign patterns ({}, {1}), two-sided 4/32.
    assert out["wilcoxon"]["statistic"] == 1.0 and out["wilcoxon"]["p"] == pytest.approx(4 / 32)
    assert out["sign"]["positive"] == 4


def test_across_sources_reports_the_tests(repro):
    def report(values):
        return {"summary": [{"arm": arm, "k": 100, "values": v} for arm, v in values.items()]}
    reports = {d: report({"subnetwork": [0.6 + d / 100, 0.62], "scratch": [0.5, 0.5 + d / 50]}) for d in range(5)}
    table = repro.across_sources(reports, ["subnetwork", "scratch"], [100])
    lead = table["100"]["lead"]["scratch"]
    expected = [statistics.fmean([0.6 + d / 100, 0.62]) - statistics.fmean([0.5, 0.5 + d / 50]) for d in range(5)]
    assert list(lead["per_source"].values()) == pytest.approx(expected)
    assert lead["paired_tests_across_sources"]["sign"] == repro.sign_test(expected)


def test_defaults_are_the_authors(repro, monkeypatch):
    """Parse the script's defaults: the authors' transplant, dropout and discovery settings, >= 5 sources."""
    seen = {}

    def fake_run(args):
        seen[args.data_seed] = args
        rows = [{"arm": arm, "k": k, "values": [0.5 + args.data_seed / 100, 0.5]} for arm in args.arm_list()
                for k in args.k_list()]
        return {"summary": rows, "diagnostics": {}, "warnings": [], "settings": {}}

    monkeypatch.setattr(repro, "run_induction", fake_run)
    monkeypatch.setattr("sys.argv", ["repro_subtask_induction.py"])
    repro.main()
    assert sorted(seen) == [0, 1, 2, 3, 4]
    args = seen[0]
    assert (args.carry, args.dropout, args.mask_target_modules) == ("source", 0.1, "c_attn,c_proj,c_fc")
    assert (args.mask_epochs, args.mask_learning_rate, args.mask_batch_size, args.mask_penalty, args.mask_init,
            args.mask_beta_max) == (50, 1e-3, 64, 1e-7, -0.1, 100.0)   # batch: see the script (authors 500)
    assert args.k_list() == [0, 10, 16, 25, 40, 64, 100, 160, 250, 400, 640]
    assert args.arm_list() == ["subnetwork", "random", "scratch"]
