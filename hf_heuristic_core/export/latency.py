"""Forward latency of several models measured in one process, round-robin, so that load changes on a shared machine
hit all of them alike (used by the study's slim report and `benchmarks/speed/bench_slim.py`)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

import torch

__all__ = ["Latency", "round_robin_latency", "round_robin_times"]


class Latency(NamedTuple):
    """Median seconds per function, and how many timed rounds they come from."""

    median_s: dict[str, float]
    rounds: int


def _synchronize() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def round_robin_times(fns: Mapping[str, Callable[[], object]], repeats: int = 5, warmup: int = 1,
                      min_seconds: float = 0.0, max_repeats: int = 200) -> dict[str, list[float]]:
    """Seconds of each function in every timed round (`round_robin_latency`'s rounds): entry `i` of every list comes
    from the same round, so ratios taken round by round pair measurements made under the same load, and their spread
    says how stable a ratio is."""
    if repeats < 1:
        raise ValueError(f"repeats must be at least 1, got {repeats}.")
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    rounds = 0
    while rounds < repeats or (rounds < max_repeats and sum(map(sum, times.values())) < min_seconds):
        rounds += 1
        for name, fn in fns.items():
            _synchronize()
            start = time.perf_counter()
            fn()
            _synchronize()
            times[name].append(time.perf_counter() - start)
    return times


def round_robin_latency(fns: Mapping[str, Callable[[], object]], repeats: int = 5, warmup: int = 1,
                        min_seconds: float = 0.0, max_repeats: int = 200) -> Latency:
    """Median seconds of each function over at least `repeats` rounds (full, hooked, slim, full, ...), after
    `warmup` untimed rounds (first-call allocation and kernel selection). With `min_seconds`, rounds go on until that
    much time was measured (at most `max_repeats` rounds), so millisecond-scale forwards get enough samples for a
    stable median on a busy machine."""
    times = round_robin_times(fns, repeats=repeats, warmup=warmup, min_seconds=min_seconds, max_repeats=max_repeats)
    return Latency({name: statistics.median(values) for name, values in times.items()},
                   len(next(iter(times.values()), [])))
