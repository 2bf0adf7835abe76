"""`round_robin_latency` times every function in each round and reports medians and the number of rounds;
`round_robin_times` gives the rounds themselves, in order."""

from __future__ import annotations

import time

import pytest

from hf_heuristic_core.export.latency import round_robin_latency, round_robin_times


def test_medians_order_the_functions_and_rounds_extend_to_min_seconds():
    calls = {"fast": 0, "slow": 0}

    def run(name: str, seconds: float):
        def call():
            calls[name] += 1
            time.sleep(seconds)
        return call

    medians, rounds = round_robin_latency({"fast": run("fast", 0.001), "slow": run("slow", 0.01)}, repeats=3)
    assert rounds == 3 and calls == {"fast": 4, "slow": 4}           # one warm-up round + 3 timed
    assert 0.001 <= medians["fast"] < medians["slow"] and medians["slow"] >= 0.01
    _, rounds = round_robin_latency({"fast": run("fast", 0.001)}, repeats=2, warmup=0, min_seconds=0.05)
    assert 10 <= rounds <= 50                                        # ~1 ms a round until 50 ms were measured
    _, rounds = round_robin_latency({"fast": run("fast", 0.001)}, repeats=2, min_seconds=10, max_repeats=6)
    assert rounds == 6
    with pytest.raises(ValueError, match="repeats must be at least 1"):
        round_robin_latency({"fast": run("fast", 0.0)}, repeats=0)


def test_round_robin_times_keeps_every_round_in_order():
    order = []

    def run(name: str, seconds: float):
        def call():
            order.append(name)
            time.sleep(seconds)
        return call

    times = round_robin_times({"a": run("a", 0.001), "b": run("b", 0.02)}, repeats=4, warmup=1)
    assert order == ["a", "b"] * 5                                   # warm-up round, then 4 timed, a before b
    assert len(times["a"]) == len(times["b"]) == 4
    assert all(0.001 <= a < b and b >= 0.02 for a, b in zip(times["a"], times["b"]))
