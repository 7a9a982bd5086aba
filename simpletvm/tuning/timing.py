"""How the profile stage times a candidate, so that its timing predicts the same kernel
inside the model.

A layer inside a model finds its input just written by the layer before and its weights
where the rest of the model left them: in the last-level cache when the model's weights
fit there, in memory when they do not. The cache modes stand for these cases:

- ``"memory"``: before each run every core of the runtime's pool streams through a buffer
  of the L3's size, reading it and writing a second one, so the caches are full of other
  data, as the rest of a model larger than the L3 leaves them; the input is read again.
  For ResNet-18 (46 MB of weights) the model ran 0.93-1.04x its kernels timed this way,
  measured in alternating rounds, against 1.08-1.11x with MetaSchedule's
  ``enable_cpu_cache_flush`` (the arguments flushed, the caches left empty). A remote
  device is timed with that flush: the eviction kernel lives in the local runner's process.
- ``"l3"``: before each run every core of the pool streams twice its private cache
  through, which pushes the arguments out of L1 and L2 into the L3; the input is read
  again. The quickstart model (6.7 MB) ran 0.98-1.00x its kernels timed this way and
  MobileNetV2 1.0 (14 MB) 1.05-1.14x (0.89x flushed, 0.75x from memory as above).
- ``"off"``: nothing is evicted: every repeat after the first finds the data hot.
- ``"auto"``: ``"l3"`` for a model whose weights fit in the L3, else ``"memory"``.

A candidate timed here forks its parallel loops onto the pool the built model will use
(:mod:`simpletvm.fork_join`), so the search ranks kernels by what they cost in the model,
its arguments are filled without waking TVM's own pool (:func:`alloc_arguments`), and its
first timed runs are dropped (they pay once-only costs the model never meets).
"""

from __future__ import annotations

import math
import os
import tempfile
from contextlib import suppress
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable

CACHE_MODES = ("auto", "memory", "l3", "off")
EVICT_PRIVATE_CACHES = "simpletvm.evict_private_caches"  # the "l3" mode's preprocessor
EVICT_ALL_CACHES = "simpletvm.evict_all_caches"  # the local "memory" mode's preprocessor
FLUSH_ARGUMENTS = "cache_flush_cpu_non_first_arg"  # TVM's, for a remote "memory" device
WARMUP_RUNS = 3  # timed runs of each candidate that are dropped (:func:`_timed_runs`)


def cache_mode(value: str | bool) -> str:
    """The cache mode ``value`` names; ``True``/``False`` are the on/off switch of earlier
    versions ("memory"/"off")."""
    if isinstance(value, bool):
        return "memory" if value else "off"
    if value not in CACHE_MODES:
        raise ValueError(f"unknown cache_flush {value!r}: choose one of {list(CACHE_MODES)}")
    return value


def resolve_cache_mode(value: str | bool, weight_bytes: int, *, device_type: str,
                       local: bool) -> str:
    """The mode a job times its candidates with: ``auto`` decided for a model whose
    weights take ``weight_bytes``, on this host's L3; only a local CPU runner can time
    from L3."""
    from ..hostinfo import cache_bytes

    mode = cache_mode(value)
    if device_type != "cpu":
        return "off"
    if not local and mode == "l3":
        return "memory"
    if mode != "auto":
        return mode
    l3 = cache_bytes().get(3, 0)
    return "l3" if local and weight_bytes <= l3 else "memory"


def model_weight_bytes(mod) -> int:
    """Bytes of the constants (the weights, once bound) of a Relax module's functions."""
    from tvm import relax
    from tvm.ir.expr import Constant
    from tvm.runtime import Tensor

    seen: dict[int, int] = {}  # by the constant's address: each visit wraps it anew

    def visit(node) -> None:
        value = getattr(node, "value", None)  # a tensor constant's (an immediate's: a number)
        if isinstance(node, Constant) and isinstance(value, Tensor):
            seen[node.__chandle__()] = math.prod(value.shape) * _itemsize(str(value.dtype))

    for _, function in mod.functions.items():
        if isinstance(function, relax.Function):
            relax.analysis.post_order_visit(function.body, visit)
    return sum(seen.values())


def _itemsize(dtype: str) -> int:
    import numpy as np

    try:
        return np.dtype(dtype).itemsize
    except TypeError:  # bfloat16 and other types numpy does not name
        return 2


def evaluator_config(options, mode: str):
    """MetaSchedule's timing settings for ``options`` in cache ``mode``."""
    from tvm.s_tir import meta_schedule as ms

    return ms.runner.EvaluatorConfig(
        number=options.number, repeat=options.repeat, min_repeat_ms=options.min_repeat_ms,
        enable_cpu_cache_flush=mode == "memory")


def run_evaluator(mode: str) -> Callable:
    """The local runner's evaluator for ``mode``."""
    return {"l3": run_evaluator_from_l3, "memory": run_evaluator_from_memory}.get(
        mode, run_evaluator_as_configured)


def alloc_arguments(device, args_info, alloc_repeat: int) -> list:
    """The local runner's arguments for a candidate, as MetaSchedule allocates them, filled
    on this thread. MetaSchedule's random fill runs on TVM's own pool: its woken workers
    spin on the cores the timed kernel needs, and quieting that pool instead (one thread)
    bound the caller to one core; the quickstart's kernels timed 10-25% slower either way
    than they run in the model (bench/estimate_fidelity.py)."""
    from tvm.s_tir.meta_schedule.runner.utils import alloc_argument_common

    return alloc_argument_common(_fill_on_this_thread, device, args_info, alloc_repeat)


def _fill_on_this_thread(tensor) -> None:
    """Uniform values in [-1, 1) for floating-point tensors, zeros for the others (valid
    indices whatever they index)."""
    import numpy as np

    shape = [int(n) for n in tensor.shape]
    try:
        dtype = np.dtype(str(tensor.dtype))
    except TypeError:  # bfloat16 and other types numpy does not name: TVM's fill
        import tvm

        tvm.get_global_func("tvm.contrib.random.random_fill_for_measure")(tensor)
        return
    if dtype.kind == "f":
        values = (_random().random(shape, dtype=np.float32) * 2 - 1).astype(dtype)
    else:
        values = np.zeros(shape, dtype)
    tensor.copyfrom(values)


@lru_cache(maxsize=1)
def _random():
    import numpy as np

    return np.random.default_rng(0)


def warmed_up(runner_inputs: list) -> list:
    """The profile stage's inputs with the first one timed twice, the first timing to be
    dropped: a stage's first candidate runs slow (a core that idled through select and
    build runs its first tens of milliseconds slowly; the search's best, timed first, came
    out 1.5-2.5x its own timing while the next ones matched theirs), and the cost model
    ranks its favourite first."""
    return runner_inputs[:1] + runner_inputs


def preprocessor(mode: str) -> str:
    """The name of the function the local evaluator of ``mode`` runs before each timed run
    ("" for none), registered in this process."""
    if mode not in ("l3", "memory"):
        return ""
    _register_eviction(mode)
    return EVICT_PRIVATE_CACHES if mode == "l3" else EVICT_ALL_CACHES


def run_evaluator_as_configured(rt_mod, device, evaluator_config, repeated_args
                                ) -> list[float]:
    """Times like MetaSchedule's evaluator (the arguments flushed, or the caches left
    alone, as configured), the kernel on the model's pool (runs in the local runner's
    worker process)."""
    flush = FLUSH_ARGUMENTS if evaluator_config.enable_cpu_cache_flush else ""
    return _timed_runs(rt_mod, device, evaluator_config, repeated_args, flush)


def run_evaluator_from_l3(rt_mod, device, evaluator_config, repeated_args) -> list[float]:
    """Times like MetaSchedule's evaluator, with the private caches evicted before each
    run (runs in the local runner's worker process)."""
    return _timed_runs(rt_mod, device, evaluator_config, repeated_args, preprocessor("l3"))


def run_evaluator_from_memory(rt_mod, device, evaluator_config, repeated_args
                              ) -> list[float]:
    """Times like MetaSchedule's evaluator, with every cache filled with other data
    before each run (runs in the local runner's worker process)."""
    return _timed_runs(rt_mod, device, evaluator_config, repeated_args,
                       preprocessor("memory"))


def _timed_runs(rt_mod, device, evaluator_config, repeated_args, preprocess: str
                ) -> list[float]:
    """``repeat`` timings per argument set, after WARMUP_RUNS timed runs that are dropped.

    A freshly loaded candidate takes a few runs to reach the pace it keeps: timed 16 times
    from L3 (the quickstart's best records), its runs came out at 2.0, 1.10 and 1.03 times
    the later ones' median, then level; of the 5 runs kept after dropping one, the first
    two were 4-11% above the others. The model, calling every kernel over and over, only
    ever meets the level pace. The candidate runs on the model's pool (its preprocessor,
    registered before, too)."""
    _kernels_on_pool()
    evaluator = rt_mod.time_evaluator(
        func_name=rt_mod.entry_name, dev=device, number=evaluator_config.number,
        repeat=evaluator_config.repeat + WARMUP_RUNS,
        min_repeat_ms=evaluator_config.min_repeat_ms, f_preproc=preprocess)
    costs: list[float] = []
    for args in repeated_args:
        device.sync()
        costs.extend(float(cost) for cost in evaluator(*args).results[WARMUP_RUNS:])
    return costs


@lru_cache(maxsize=None)
def _register_eviction(mode: str) -> tempfile.TemporaryDirectory:
    """Register the preprocessor of ``mode`` (:func:`preprocessor`): a parallel kernel on
    the runtime's own threads (the ones the timed kernel runs on) reads one buffer and
    writes another, each a core's L2 per thread ("l3") or the L3 in all ("memory"), then
    the input is read again, as the layer before would have left it."""
    import tvm

    from ..hostinfo import cache_bytes

    sizes, threads = cache_bytes(), _runtime_threads()
    name, thread_bytes = ((EVICT_PRIVATE_CACHES, sizes.get(2, 1 << 20)) if mode == "l3" else
                          (EVICT_ALL_CACHES, sizes.get(3, 32 << 20) // threads))
    evict, buffers, scratch = _eviction_kernel(threads, thread_bytes)

    def preprocess(*args: Any) -> None:
        evict(*buffers)
        if args:
            args[0].numpy()

    tvm.register_global_func(name, preprocess, override=True)
    return scratch  # the eviction library's directory: cached, so it outlives the loads


def _eviction_kernel(threads: int, thread_bytes: int):
    import numpy as np
    import tvm
    from tvm import te

    shape = (threads, max(thread_bytes // 4 // 16 * 16, 16))
    source = te.placeholder(shape, "float32", name="source")
    sink = te.compute(shape, lambda t, i: source[t, i] + 1.0, name="sink")
    schedule = tvm.s_tir.Schedule(te.create_prim_func([source, sink]))
    thread, element = schedule.get_loops(schedule.get_sblock("sink"))
    schedule.parallel(thread)
    schedule.vectorize(schedule.split(element, [None, 16])[1])
    # a loaded library, not LLVM's JIT, so its loop runs on the timed kernels' pool too:
    # two pools each holding a core while they wait slowed the candidates 3x
    scratch = tempfile.TemporaryDirectory(prefix="simpletvm-evict-")
    library = Path(scratch.name) / "evict.so"
    tvm.compile(schedule.mod, target={"kind": "llvm"}).export_library(str(library))
    kernel = tvm.runtime.load_module(str(library))["main"]
    buffers = [tvm.runtime.tensor(np.zeros(shape, "float32")) for _ in range(2)]
    return kernel, buffers, scratch


def _kernels_on_pool() -> None:
    """Point the loaded kernels at the pool the built model runs on; where it cannot be
    had, the model keeps TVM's pool too, and so do the candidates."""
    from ..fork_join import PoolUnavailable, use_for_loaded_kernels

    with suppress(PoolUnavailable):
        use_for_loaded_kernels(_runtime_threads())


def _runtime_threads() -> int:
    from ..targets import RUNTIME_THREADS_VARIABLE

    return max(1, int(os.environ.get(RUNTIME_THREADS_VARIABLE) or os.cpu_count() or 1))
