"""`bench_slim.py`'s ratio against the FLOPs limit is taken round by round; its spread is the half-width of the
median's distribution-free ~95% confidence interval, checked here on hand-computed rounds."""

from __future__ import annotations

import pytest
from benchmark_scripts import load_script


def test_ratio_with_spread_by_hand():
    bench = load_script("speed/bench_slim")
    # per-round slim / (0.5 x full): 1.0, 1.2, 0.8, 1.1, 0.9 -> median 1.0; 5 rounds: the interval is the whole range
    slim, full = [0.5, 0.6, 0.4, 0.55, 0.45], [1.0] * 5
    median, spread, ratios = bench.ratio_with_spread(slim, full, scale=0.5)
    assert median == pytest.approx(1.0) and spread == pytest.approx(0.2)
    assert ratios == pytest.approx([1.0, 1.2, 0.8, 1.1, 0.9])
    # a load spike in one round moves both of its times: the paired ratio does not see it
    median, spread, _ = bench.ratio_with_spread([0.5, 5.0, 0.5], [1.0, 10.0, 1.0], scale=0.5)
    assert median == pytest.approx(1.0) and spread == pytest.approx(0.0)


def test_median_interval_uses_the_binomial_order_statistics():
    bench = load_script("speed/bench_slim")
    values = list(range(1, 16))                   # n = 15: k = floor(7.5 - 0.98 sqrt(15)) = 3 -> 3rd and 13th
    assert bench.median_interval(values) == (3, 13)
    values = list(range(1, 101))                  # n = 100: k = 40 -> 40th and 61st (the textbook 95% interval)
    assert bench.median_interval(values) == (40, 61)
    assert bench.median_interval([2.0, 1.0]) == (1.0, 2.0)
    assert bench.median_interval(list(range(1, 11))) == (1, 10)    # n = 10: k = 1, the whole range
    assert bench.median_interval(list(range(1, 12))) == (2, 10)    # n = 11: k = 2
