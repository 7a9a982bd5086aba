"""How many threads the runtime runs a built model on: chosen by timing the model.

Every parallel kernel forks onto TVM's thread pool and joins again, and the next kernel
reads what the other cores wrote. Where the cores are close this costs little; on a
2-vCPU host whose vCPUs sit on different core complexes (a cache-line round trip of
hundreds of nanoseconds between them) a model of short kernels can run faster on 1
thread than on 2, while on other hosts of the same kind 2 threads win (BENCHMARKS.md).
Only a measurement on the machine
tells, so building, loading or evaluating a module for this CPU times it on each thread
count and keeps the fastest, unless the context pins ``num_threads``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from statistics import median
from typing import Any

from simpletvm.runtime.evaluation import warm_up

# a model this slow on every core keeps them all: fork and join cost microseconds per
# kernel, which only a short model feels, and a slow model's calls make timing costly
LONG_CALL_S = 0.02
ROUNDS = 3  # per thread count, in turns: the host's speed drifts within a second
ROUND_S = 0.05  # of timed calls per round (after half as long of untimed ones)
AFFINITY_BIG_CORES = 1  # TVM's default thread affinity mode (kBig)


def set_runtime_threads(count: int) -> None:
    """Resize the pool this process's kernels run their parallel loops on: SimpleTVM's
    once it is in use (:mod:`simpletvm.runtime.fork_join`), else TVM's. TVM's is left alone then:
    each resize starts its workers afresh, and they spin for about 0.1 s on the cores the
    kernels need."""
    from simpletvm.runtime.fork_join import pool_threads, set_threads

    if pool_threads() is not None:
        set_threads(count)
        return
    import tvm

    tvm.get_global_func("runtime.config_threadpool")(AFFINITY_BIG_CORES, count)


def runtime_threads() -> int:
    """The threads this process's kernels run their parallel loops on."""
    from simpletvm.runtime.fork_join import pool_threads

    count = pool_threads()
    if count is not None:
        return count
    import tvm

    return int(tvm.get_global_func("runtime.NumThreads")())


def choose_runtime_threads(call: Callable[[], Any], cores: int) -> dict[str, Any]:
    """Time ``call`` (one inference) on ``cores`` threads and on 1, in turns, leave the
    pool on the faster, and say what was measured: ``{"threads": n, "median_ms": {n:
    ms}}`` (only ``cores`` when one call on them takes over :data:`LONG_CALL_S`)."""
    counts = [cores, 1] if cores > 1 else [cores]
    pinned = _pinned_below(cores)
    if pinned is not None:
        return {"threads": pinned, "median_ms": {}}
    samples: dict[int, list[float]] = {count: [] for count in counts}
    for _ in range(ROUNDS):
        for count in counts:
            set_runtime_threads(count)
            samples[count].extend(_timed_calls(call))
            if count == cores and median(samples[cores]) > LONG_CALL_S:
                return _keep_fastest({cores: samples[cores]})
    return _keep_fastest(samples)


def thread_counts_to_time(call: Callable[[], Any], cores: int) -> list[int]:
    """The thread counts worth timing a model on, as :func:`choose_runtime_threads`
    chooses among them: every core and one; only the pool's count when it started smaller
    (``TVM_NUM_THREADS``), and only every core when one call on them takes over
    :data:`LONG_CALL_S`. Costs one round of calls, not a choice."""
    pinned = _pinned_below(cores)
    if pinned is not None:
        return [pinned]
    if cores == 1 or median(_timed_calls(call)) > LONG_CALL_S:
        return [cores]
    return [cores, 1]


def _pinned_below(cores: int) -> int | None:
    """The pool's thread count when it started with fewer than ``cores``
    (``TVM_NUM_THREADS``) and stays so, else None with the pool on ``cores``."""
    set_runtime_threads(cores)
    count = runtime_threads()
    return count if count != cores else None


def _keep_fastest(samples: dict[int, list[float]]) -> dict[str, Any]:
    """Leave the pool on the count of the lowest median, and say what was measured."""
    medians = {count: median(values) for count, values in samples.items()}
    chosen = min(medians, key=medians.get)
    set_runtime_threads(chosen)
    return {
        "threads": chosen,
        "median_ms": {str(count): round(seconds * 1e3, 4) for count, seconds in medians.items()},
    }


def _timed_calls(call: Callable[[], Any]) -> list[float]:
    warm_up(call, 2, ROUND_S / 2)
    samples = []
    deadline = time.perf_counter() + ROUND_S
    while not samples or time.perf_counter() < deadline:
        start = time.perf_counter()
        call()
        samples.append(time.perf_counter() - start)
    return samples
