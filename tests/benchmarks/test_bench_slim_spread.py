"""`bench_slim.py`'s ratio against the FLOPs limit is taken round by round, with half the interquartile range of the
per-round ratios as its spread, checked here on hand-computed rounds."""

from __future__ import annotations

import pytest
from benchmark_scripts import load_script


def test_ratio_with_spread_by_hand():
    bench = load_script("speed/bench_slim")
    # per-round slim / (0.5 x full): 1.0, 1.2, 0.8, 1.1, 0.9 -> median 1.0; inclusive quartiles 0.9 and 1.1
    slim, full = [0.5, 0.6, 0.4, 0.55, 0.45], [1.0] * 5
    median, spread = bench.ratio_with_spread(slim, full, scale=0.5)
    assert median == pytest.approx(1.0) and spread == pytest.approx(0.1)
    # a load spike in one round moves both of its times: the paired ratio does not see it
    median, spread = bench.ratio_with_spread([0.5, 5.0, 0.5], [1.0, 10.0, 1.0], scale=0.5)
    assert median == pytest.approx(1.0) and spread == pytest.approx(0.0)
    assert bench.ratio_with_spread([0.3], [1.0]) == (pytest.approx(0.3), 0.0)
