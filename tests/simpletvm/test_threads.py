"""The runtime's thread count, chosen by timing the model on a fake clock (the pool is
TVM's real one)."""

from __future__ import annotations

import psutil
import pytest

from simpletvm.runtime import threads


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr("simpletvm.runtime.threads.time.perf_counter", fake)
    monkeypatch.setattr("simpletvm.runtime.evaluation.time.perf_counter", fake)
    yield fake
    threads.set_runtime_threads(psutil.cpu_count(logical=False) or 1)


def model_taking(clock, seconds_on: dict[int, float]):
    """One inference: advances the clock by its time on the pool's current size."""
    counts = []

    def call() -> None:
        count = threads.runtime_threads()
        counts.append(count)
        clock.now += seconds_on[count]

    return call, counts


def test_the_pool_is_left_on_the_faster_count(clock):
    call, counts = model_taking(clock, {2: 0.36e-3, 1: 0.24e-3})
    choice = threads.choose_runtime_threads(call, 2)
    assert choice == {"threads": 1, "median_ms": {"2": 0.36, "1": 0.24}}
    assert threads.runtime_threads() == 1
    assert set(counts) == {1, 2}
    # in turns: each count timed in every round, so drift hits both alike
    switches = sum(1 for a, b in zip(counts, counts[1:]) if a != b)
    assert switches == 2 * threads.ROUNDS - 1


def test_every_core_is_kept_where_it_is_faster(clock):
    call, _ = model_taking(clock, {2: 0.17e-3, 1: 0.24e-3})
    assert threads.choose_runtime_threads(call, 2)["threads"] == 2
    assert threads.runtime_threads() == 2


def test_a_long_model_keeps_every_core_without_timing_one(clock):
    call, counts = model_taking(clock, {2: 0.05, 1: 0.01})
    choice = threads.choose_runtime_threads(call, 2)
    assert choice == {"threads": 2, "median_ms": {"2": 50.0}}
    assert set(counts) == {2}


def test_the_counts_to_time_are_every_core_and_one_after_a_single_round(clock):
    call, counts = model_taking(clock, {2: 0.36e-3, 1: 0.24e-3})
    assert threads.thread_counts_to_time(call, 2) == [2, 1]
    assert set(counts) == {2}  # one round on every core decides, nothing timed on one


def test_a_long_model_is_timed_on_every_core_only(clock):
    call, _ = model_taking(clock, {2: 0.05, 1: 0.01})
    assert threads.thread_counts_to_time(call, 2) == [2]
    call, counts = model_taking(clock, {1: 0.01})
    assert threads.thread_counts_to_time(call, 1) == [1]
    assert counts == []  # a single core: nothing to decide
