"""How the profile stage times a candidate, so that its timing predicts the same kernel
inside the model.

A layer inside a model finds its input just written by the layer before and its weights
where the rest of the model left them: in the last-level cache when what the model
touches fits there, in memory when it does not, and partly in each on a cache shared
with other work. The cache modes stand for these cases:

- ``"memory"``: before each run every core of the runtime's pool streams through a buffer
  of the L3's size, reading it and writing a second one, so the caches are full of other
  data, as the rest of a model larger than the L3 leaves them; the activations (the
  input, the output, a residual) are read again. For such a model (ResNet-18) the
  kernels timed this way sum to the model's time more closely than with MetaSchedule's
  ``enable_cpu_cache_flush`` (the arguments flushed, the caches left empty), which times
  them too fast (BENCHMARKS.md). A remote device is timed with that flush: the eviction
  kernel lives in the local runner's process.
- ``"l3"``: before each run every core of the pool streams twice its private cache
  through, which pushes the arguments out of L1 and L2 into the L3; the activations are
  read again. For a model whose weights fit the L3 (the quickstart model) the kernels
  timed this way sum to about the model's time, where timing them from memory makes them
  too slow (BENCHMARKS.md).
- ``"model"``: before each run the pool streams as many bytes as one run of the model
  keeps in the caches (its weights and its activations' planned storage,
  :func:`model_footprint_bytes`), between the ``"l3"`` and the ``"memory"`` amounts:
  what the rest of the model passes through the caches between two calls of a kernel.
  On an L3 shared with other tenants its size says little about what a model finds
  there, and the model's own traffic says more: streamed about that much, the kernels
  sum to the model's time within a few percent, where less times them too fast and more
  too slow. The memory plan's storage, not every tensor the calls write, is the amount
  that matches better (BENCHMARKS.md).
- ``"off"``: nothing is evicted: every repeat after the first finds the data hot.
- ``"auto"``: ``"model"`` on a local CPU, ``"memory"`` through RPC.

A candidate timed here forks its parallel loops onto the pool the built model will use
(:mod:`simpletvm.runtime.fork_join`), so the search ranks kernels by what they cost in the model,
its arguments are filled without waking TVM's own pool (:func:`alloc_arguments`), and its
first timed runs are dropped (they pay once-only costs the model never meets).
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from contextlib import suppress
from functools import cache, lru_cache, partial
from pathlib import Path
from typing import Any

from simpletvm._process.scratch import scratch_directory

CACHE_MODES = ("auto", "model", "memory", "l3", "off")
EVICTING_MODES = ("model", "memory", "l3")  # the local evaluator runs an eviction kernel
EVICT_PRIVATE_CACHES = "simpletvm.evict_private_caches"  # the "l3" mode's preprocessor
EVICT_ALL_CACHES = "simpletvm.evict_all_caches"  # the local "memory" mode's preprocessor
EVICT_MODEL_FOOTPRINT = "simpletvm.evict_model_footprint"  # "model"'s, + "_<bytes>"
FLUSH_ARGUMENTS = "cache_flush_cpu_non_first_arg"  # TVM's, for a remote "memory" device
WARMUP_RUNS = 3  # timed runs of each candidate that are dropped (:func:`_timed_runs`)


def cache_mode(value: str | bool) -> str:
    """The cache mode ``value`` names; ``True``/``False``, the legacy on/off switch, stand
    for "memory"/"off" so that specs written with it keep working."""
    if isinstance(value, bool):
        return "memory" if value else "off"
    if value not in CACHE_MODES:
        raise ValueError(f"unknown cache_flush {value!r}: choose one of {list(CACHE_MODES)}")
    return value


def resolve_cache_mode(value: str | bool, *, device_type: str, local: bool) -> str:
    """The mode a job times its candidates with: ``auto`` decided for the device; only a
    local CPU runner can run the eviction kernels (through RPC, ``"memory"`` is TVM's
    flush of the arguments)."""
    mode = cache_mode(value)
    if device_type != "cpu":
        return "off"
    if mode == "auto":
        return "model" if local else "memory"
    if not local and mode in ("l3", "model"):
        return "memory"
    return mode


def model_footprint_bytes(mod) -> int:
    """Bytes one run of a Relax module keeps in the caches: its constants
    (:func:`model_weight_bytes`) and the activation storage its memory plan allocates
    (:func:`planned_activation_bytes`)."""
    return model_weight_bytes(mod) + planned_activation_bytes(mod)


def planned_activation_bytes(mod) -> int:
    """Bytes of the storage ``main``'s tensors get from Relax's static memory plan, which
    reuses one buffer for tensors whose lives do not overlap: MobileNetV2 1.0 writes
    25.5 MB of tensors a run into 8.2 MB of storage. Storage of a size known only at run
    time is not counted."""
    import tvm
    from tvm import relax
    from tvm.tirx import IntImm

    if not any(
        gv.name_hint == "main" and isinstance(function, relax.Function)
        for gv, function in mod.functions.items()
    ):
        return 0
    planned = tvm.transform.Sequential(
        [
            relax.transform.LegalizeOps(),
            relax.transform.RewriteDataflowReshape(),
            relax.transform.ToNonDataflow(),
            relax.transform.RemovePurityChecking(),
            relax.transform.CallTIRRewrite(),
            relax.transform.StaticPlanBlockMemory(),
        ]
    )(mod)
    sizes: list[int] = []

    def visit(node) -> None:
        if (
            isinstance(node, relax.Call)
            and isinstance(node.op, tvm.ir.Op)
            and node.op.name == "relax.memory.alloc_storage"
        ):
            size = node.args[0].values[0]
            if isinstance(size, IntImm):
                sizes.append(int(size))

    relax.analysis.post_order_visit(planned["main"].body, visit)
    return sum(sizes)


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
        number=options.number,
        repeat=options.repeat,
        min_repeat_ms=options.min_repeat_ms,
        enable_cpu_cache_flush=mode == "memory",
    )


def run_evaluator(mode: str, model_bytes: int = 0) -> Callable:
    """The local runner's evaluator for ``mode`` (``model_bytes``: what ``"model"``
    streams, :func:`model_footprint_bytes`)."""
    if mode in EVICTING_MODES:
        return partial(run_evaluator_evicting, mode, model_bytes if mode == "model" else 0)
    return run_evaluator_as_configured


def alloc_arguments(device, args_info, alloc_repeat: int) -> list:
    """The local runner's arguments for a candidate, as MetaSchedule allocates them, filled
    on this thread. MetaSchedule's random fill runs on TVM's own pool: its woken workers
    spin on the cores the timed kernel needs, and quieting that pool instead (one thread)
    binds the caller to one core; either way kernels would time slower than they run in
    the model (bench/diagnostics/kernels_in_situ.py --fidelity, BENCHMARKS.md)."""
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
    build runs its first tens of milliseconds slowly, so the candidate timed first comes
    out well above its own later timings while the next ones match theirs; BENCHMARKS.md),
    and the cost model ranks its favourite first."""
    return runner_inputs[:1] + runner_inputs


def preprocessor(mode: str, model_bytes: int = 0) -> str:
    """The name of the function the local evaluator of ``mode`` runs before each timed run
    ("" for none), registered in this process."""
    if mode not in EVICTING_MODES:
        return ""
    return _register_eviction(mode, model_bytes if mode == "model" else 0)


def eviction_bytes(mode: str, model_bytes: int, cache_sizes: dict[int, int], threads: int) -> int:
    """Bytes of each of the two buffers every thread of the pool streams before a run
    (one read, one written): a core's L2 (``"l3"``), the L3 over the threads
    (``"memory"``), or the model's own traffic (``"model"``) between those two."""
    l2, l3 = cache_sizes.get(2, 1 << 20), cache_sizes.get(3, 32 << 20)
    if mode == "l3":
        return l2
    if mode == "memory":
        return l3 // threads
    return min(max(model_bytes, 2 * l2 * threads), 2 * l3) // (2 * threads)


def run_evaluator_as_configured(rt_mod, device, evaluator_config, repeated_args) -> list[float]:
    """Times like MetaSchedule's evaluator (the arguments flushed, or the caches left
    alone, as configured), the kernel on the model's pool (runs in the local runner's
    worker process)."""
    flush = FLUSH_ARGUMENTS if evaluator_config.enable_cpu_cache_flush else ""
    return _timed_runs(rt_mod, device, evaluator_config, repeated_args, flush)


def run_evaluator_evicting(
    mode: str, model_bytes: int, rt_mod, device, evaluator_config, repeated_args
) -> list[float]:
    """Times like MetaSchedule's evaluator, with the caches set by ``mode``'s preprocessor
    before each run (runs in the local runner's worker process)."""
    return _timed_runs(
        rt_mod, device, evaluator_config, repeated_args, preprocessor(mode, model_bytes)
    )


def _timed_runs(rt_mod, device, evaluator_config, repeated_args, preprocess: str) -> list[float]:
    """``repeat`` timings per argument set, after WARMUP_RUNS timed runs that are dropped.

    A freshly loaded candidate takes a few runs to reach the pace it keeps: its first run
    takes about twice the later ones' time, the next two still a few percent more, then
    the runs level off (BENCHMARKS.md). The model, calling every kernel over and over, only
    ever meets the level pace. The candidate runs on the model's pool (its preprocessor,
    registered before, too)."""
    _kernels_on_pool()
    evaluator = rt_mod.time_evaluator(
        func_name=rt_mod.entry_name,
        dev=device,
        number=evaluator_config.number,
        repeat=evaluator_config.repeat + WARMUP_RUNS,
        min_repeat_ms=evaluator_config.min_repeat_ms,
        f_preproc=preprocess,
    )
    costs: list[float] = []
    for args in repeated_args:
        device.sync()
        costs.extend(float(cost) for cost in evaluator(*args).results[WARMUP_RUNS:])
    return costs


@cache
def _register_eviction(mode: str, model_bytes: int) -> str:
    """Register the preprocessor of ``mode`` (:func:`preprocessor`): a parallel kernel on
    the runtime's own threads (the ones the timed kernel runs on) reads one buffer and
    writes another, each :func:`eviction_bytes` per thread, then the kernel's
    :func:`activations` are read again, as the layers around it would have left them.
    Returns its name (cached: registered once per process)."""
    import tvm

    from simpletvm.hostinfo import cache_bytes

    threads = _runtime_threads()
    thread_bytes = eviction_bytes(mode, model_bytes, cache_bytes(), threads)
    name = {"l3": EVICT_PRIVATE_CACHES, "memory": EVICT_ALL_CACHES}.get(
        mode, f"{EVICT_MODEL_FOOTPRINT}_{model_bytes}"
    )
    evict, buffers = _eviction_kernel(threads, thread_bytes)

    def preprocess(*args: Any) -> None:
        evict(*buffers)
        for tensor in activations(args):
            tensor.numpy()

    tvm.register_global_func(name, preprocess, override=True)
    return name


def activations(args: tuple) -> list:
    """The arguments of a kernel that the layers around it leave in the cache: its input
    (the first) and what has its output's shape (the output, the residual it adds), read
    again after an eviction. The others are weights, as cold as the eviction left them."""
    if not args:
        return []
    output_shape = tuple(args[-1].shape)
    return [args[0]] + [tensor for tensor in args[1:] if tuple(tensor.shape) == output_shape]


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
    # two pools each holding a core while they wait slow the candidates severalfold (the
    # file can go once loaded)
    with scratch_directory("evict") as scratch:
        library = Path(scratch) / "evict.so"
        tvm.compile(schedule.mod, target={"kind": "llvm"}).export_library(str(library))
        kernel = tvm.runtime.load_module(str(library))["main"]
    buffers = [tvm.runtime.tensor(np.zeros(shape, "float32")) for _ in range(2)]
    return kernel, buffers


def _kernels_on_pool() -> None:
    """Point the loaded kernels at the pool the built model runs on; where it cannot be
    had, the model keeps TVM's pool too, and so do the candidates."""
    from simpletvm.runtime.fork_join import PoolUnavailable, use_for_loaded_kernels

    with suppress(PoolUnavailable):
        use_for_loaded_kernels(_runtime_threads())


def _runtime_threads() -> int:
    from simpletvm.targets import RUNTIME_THREADS_VARIABLE

    return max(1, int(os.environ.get(RUNTIME_THREADS_VARIABLE) or os.cpu_count() or 1))
