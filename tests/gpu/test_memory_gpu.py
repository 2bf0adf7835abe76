"""Peak GPU memory of the one-copy KL step against the two-copy step on BERT-base shape (random weights, batch 32 x
128): the same-model teacher with activation checkpointing must stay at or below 0.65 (issue #28); the measurement is
benchmarks/speed/bench_gpu.py's, which also reports every other option."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks" / "speed"))
import bench_gpu  # noqa: E402


@pytest.mark.parametrize("head, configuration", [("seq", "one_copy_ckpt"), ("lm", "one_copy_all")])
def test_one_copy_step_peak_memory_is_at_most_065_of_two_copies(head, configuration):
    two = bench_gpu.peak_memory("two_copies", head)
    one = bench_gpu.peak_memory(configuration, head)
    plain_one = bench_gpu.peak_memory("one_copy", head)
    assert one <= 0.65 * two, f"{configuration}: {one / 2**20:.0f} MiB vs two copies {two / 2**20:.0f} MiB"
    assert one < plain_one   # the options are what it took
