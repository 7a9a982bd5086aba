"""Whole-model latency: raw samples and the statistics reports need."""

from __future__ import annotations

import time
from typing import Any

import numpy as np


def summarize(samples_s: list[float]) -> dict[str, Any]:
    """Mean, median, std, min, max, p10 and p90 in milliseconds, plus the raw samples."""
    ms = np.asarray(samples_s, dtype=float) * 1e3
    if ms.size == 0:
        raise ValueError("no samples to summarize")
    return {
        "samples_ms": ms.tolist(),
        "count": int(ms.size),
        "mean_ms": float(ms.mean()),
        "median_ms": float(np.median(ms)),
        "std_ms": float(ms.std(ddof=1)) if ms.size > 1 else 0.0,
        "min_ms": float(ms.min()),
        "max_ms": float(ms.max()),
        "p10_ms": float(np.percentile(ms, 10)),
        "p90_ms": float(np.percentile(ms, 90)),
    }


def random_inputs(specs, seed: int = 0) -> list[np.ndarray]:
    """Random data of each input's shape and dtype (inputs of ML models rarely matter
    for latency, but a fixed seed keeps runs comparable)."""
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in specs:
        if np.issubdtype(np.dtype(spec.dtype), np.floating):
            arrays.append(rng.standard_normal(spec.shape).astype(spec.dtype))
        elif spec.dtype == "bool":
            arrays.append(rng.integers(0, 2, spec.shape).astype(bool))
        else:
            arrays.append(rng.integers(0, 16, spec.shape).astype(spec.dtype))
    return arrays


# A machine that idled (a build, an import) runs the first 20-50 ms of calls slowly, the
# first 20 ms at about twice the steady time, so timing that starts right after load()
# would report the slow start, not the model (BENCHMARKS.md). The warm-up runs at least
# this long.
MIN_WARMUP_S = 0.2
# the floor of a warm-up that follows another timed call at once (the next turn of
# alternating rounds): the machine has not idled, so only the callee's own data has to
# come back into the caches
RETURN_WARMUP_S = 0.02


def warm_up(call, calls: int, seconds: float = MIN_WARMUP_S) -> None:
    """Run ``call`` ``calls`` times and for at least ``seconds``."""
    deadline = time.perf_counter() + seconds
    done = 0
    while done < calls or time.perf_counter() < deadline:
        call()
        done += 1


def vm_timer(
    vm,
    device,
    inputs: list,
    warmup: int,
    repeat: int,
    number: int,
    warmup_s: float = MIN_WARMUP_S,
):
    """Set ``inputs`` on ``vm``'s ``main`` and run it ``warmup`` times and for at least
    ``warmup_s``; returns a timer whose every call gives ``repeat`` samples (seconds),
    each the mean of ``number`` runs.

    Timing happens inside TVM's C++ time evaluator, so Python overhead is not counted.
    """
    vm.set_input("main", *inputs)
    warm_up(lambda: vm.invoke_stateful("main"), warmup, warmup_s)
    device.sync()
    timer = vm.time_evaluator(
        "invoke_stateful", device, number=number, repeat=repeat, min_repeat_ms=0
    )
    return lambda: [float(s) for s in timer("main").results]


def time_vm(vm, device, inputs: list, warmup: int, repeat: int, number: int) -> list[float]:
    """``repeat`` samples, each the mean of ``number`` runs, after ``warmup`` runs and
    at least MIN_WARMUP_S of them (:func:`vm_timer`)."""
    return vm_timer(vm, device, inputs, warmup, repeat, number)()
