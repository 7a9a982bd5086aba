"""A tuned model side by side with what users already run: timed alike, in turns.

The quickstart and the peer benchmark both compare SimpleTVM's module with TFLite
(XNNPACK) and others on one input. Every runner is a call that returns NumPy from
NumPy, so each pays the same Python and copy costs a user's inference loop pays.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable, Iterator
from contextlib import contextmanager

import numpy as np

from simpletvm.runtime.evaluation import MIN_WARMUP_S, RETURN_WARMUP_S, warm_up
from simpletvm.runtime.reference import tflite_interpreter

Runner = Callable[[], np.ndarray]


def tflite_runner(flatbuffer: bytes, example: np.ndarray, threads: int) -> Runner:
    """TFLite's interpreter with its default XNNPACK delegate on ``threads`` threads."""
    interpreter = tflite_interpreter(flatbuffer, threads)
    source = interpreter.get_input_details()[0]["index"]
    result = interpreter.get_output_details()[0]["index"]

    def infer() -> np.ndarray:
        interpreter.set_tensor(source, example)
        interpreter.invoke()
        return interpreter.get_tensor(result)

    return infer


def tflite_runners(flatbuffer: bytes, example: np.ndarray, threads: int) -> dict[int, Runner]:
    """TFLite on ``threads`` threads and, when that is more than one, on 1, keyed by the
    count: SimpleTVM's module runs on whichever count is faster for it on this machine
    (:mod:`simpletvm.runtime.threads`), so a fair comparison takes TFLite's faster too."""
    return {
        count: tflite_runner(flatbuffer, example, count)
        for count in sorted({threads, 1}, reverse=True)
    }


def simpletvm_runner(stvm, example: np.ndarray) -> Runner:
    """A built SimpleTVM module's entry function, NumPy in, NumPy out, as lean as
    TFLite's ``set_tensor``/``invoke``/``get_tensor``.

    The input is copied into one tensor allocated up front (through a NumPy view of it),
    as ``set_tensor`` copies into the interpreter's own; the output comes back as
    ``run()`` returns it (:func:`~simpletvm.runtime.loaded.as_numpy`: a view of the tensor the call
    returned, which no later call reuses while the view lives). TVM's own ``copyfrom``
    and ``numpy()`` cost several times more per call than this way and than TFLite's
    copies, enough to tilt a comparison on a model of a tenth of a millisecond
    (BENCHMARKS.md)."""
    import tvm

    from simpletvm.runtime.loaded import as_numpy

    main = stvm.vm["main"]
    data = tvm.runtime.empty(example.shape, str(example.dtype), stvm.target.device())
    staged = np.from_dlpack(data)

    def infer() -> np.ndarray:
        np.copyto(staged, example)
        return as_numpy(main(data))

    return infer


@contextmanager
def simpletvm_runners(
    stvm, example: np.ndarray, counts: Iterable[int] | None = None
) -> Iterator[dict[int, Runner]]:
    """The module on each of the thread ``counts``, keyed by the count, as
    :func:`tflite_runners` gives TFLite's; by default on every core and on one, or only
    on the count the context pins (``num_threads``). The faster count is the host's state
    of the moment (the count a build chose can be the slower one minutes later, and
    TFLite's faster count moves too), so each side is compared on its faster count
    measured in the same rounds."""
    infer = simpletvm_runner(stvm, example)
    with at_thread_counts({"module": infer}, thread_counts(stvm, counts)) as runners:
        yield runners["module"]


def thread_counts(stvm, counts: Iterable[int] | None = None) -> list[int]:
    """``counts``, or the counts a module is compared on: every core and one, or only the
    count the context pins (``num_threads``); the largest first."""
    if counts is None:
        from simpletvm.runtime.threads import runtime_threads

        pinned = stvm.context.num_threads is not None
        counts = {runtime_threads()} if pinned else {stvm.target.host_cores(), 1}
    return sorted(set(counts), reverse=True)


@contextmanager
def at_thread_counts(
    runners: dict[Hashable, Runner], counts: Iterable[int]
) -> Iterator[dict[Hashable, dict[int, Runner]]]:
    """Each of ``runners`` (SimpleTVM modules: they share TVM's thread pool) on each of
    ``counts`` (in their order), keyed by name and count. A runner resizes the pool only when another
    left it at another count: once per turn, not per call. Leaving the block sets the
    pool back to the count it had."""
    from simpletvm.runtime.threads import runtime_threads, set_runtime_threads

    before = runtime_threads()
    counts = list(counts)
    current = None  # the count the runners last set

    def on(infer: Runner, count: int) -> Runner:
        def run() -> np.ndarray:
            nonlocal current
            if current != count:
                set_runtime_threads(count)
                current = count
            return infer()

        return run

    try:
        yield {
            name: {count: on(infer, count) for count in counts} for name, infer in runners.items()
        }
    finally:
        set_runtime_threads(before)


def time_side_by_side(
    runners: dict[Hashable, Runner],
    rounds: int,
    calls: int | dict[Hashable, int],
    warmup: int,
    warmup_s: float = MIN_WARMUP_S,
    before_each_call: Callable[[], object] | None = None,
) -> dict[Hashable, list[float]]:
    """Per-call seconds of every runner, the runners taking turns round by round, so
    drift on a shared machine hits all alike.

    ``calls``: timed calls per turn, for every runner or per runner (by name). Each turn
    starts with ``warmup`` untimed calls: the runner before it leaves the
    caches holding its own data (a long untuned TVM call slows the tuned one after it by
    about a quarter, BENCHMARKS.md), and a runner is timed in its steady state, not in its
    neighbour's. A runner's first turn warms up for at least ``warmup_s`` too: a machine
    that idled runs its first 20-50 ms of calls slowly
    (:data:`~simpletvm.runtime.evaluation.MIN_WARMUP_S`); the turns after it follow
    another runner's without a pause, so they need only
    :data:`~simpletvm.runtime.evaluation.RETURN_WARMUP_S`.
    ``before_each_call`` runs, untimed, before every timed call (a benchmark evicting the
    caches)."""
    samples: dict[Hashable, list[float]] = {name: [] for name in runners}
    per_runner = calls if isinstance(calls, dict) else dict.fromkeys(runners, calls)
    for index in range(rounds):
        for name, infer in runners.items():
            warm_up(infer, warmup, warmup_s if index == 0 else min(warmup_s, RETURN_WARMUP_S))
            for _ in range(per_runner[name]):
                if before_each_call is not None:
                    before_each_call()
                start = time.perf_counter()
                infer()
                samples[name].append(time.perf_counter() - start)
    return samples


def calls_filling(
    runners: dict[Hashable, Runner], seconds: float, least: int, most: int
) -> dict[Hashable, int]:
    """Per runner, the timed calls that fill about ``seconds`` (at least ``least``, at
    most ``most``), from the median of a few calls after a warm-up: a turn of a fast
    model then holds enough calls for its median to be steady, as a slow one's does
    with few."""
    counts = {}
    for name, infer in runners.items():
        # a few calls for the caches: the first round's turn warms up for the idle machine
        warm_up(infer, 3, RETURN_WARMUP_S)
        durations = []
        for _ in range(5):
            start = time.perf_counter()
            infer()
            durations.append(time.perf_counter() - start)
        each = max(float(np.median(durations)), 1e-7)
        counts[name] = int(min(most, max(least, np.ceil(seconds / each))))
    return counts
