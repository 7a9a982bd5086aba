"""A built or loaded module on this machine: its outputs as NumPy arrays, its parallel
loops on SimpleTVM's fork-join pool, and the thread count it runs fastest on."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

DLPACK_CPU = 1  # DLPack's device type of this process's CPU memory


def use_fork_join_pool(library_file, host_cores: int) -> str:
    """Point the loaded kernels' parallel loops at SimpleTVM's pool
    (:mod:`simpletvm.runtime.fork_join`). Returns which pool runs them, and why TVM's
    when ours cannot be had."""
    from simpletvm.runtime.fork_join import (
        PoolDeclined,
        PoolUnavailable,
        pool_of,
        pool_threads,
        use_for_loaded_kernels,
    )

    try:
        use_for_loaded_kernels(pool_threads() or host_cores)
        return pool_of(library_file)
    except PoolUnavailable as error:
        if not isinstance(error, PoolDeclined):
            warnings.warn(
                f"the module's parallel loops run on TVM's pool, slower for "
                f"models of many short kernels: {error}",
                stacklevel=4,
            )
        return f"tvm ({error})"


def choose_threads(vm, input_specs, target, inputs: list | None = None) -> dict[str, Any]:
    """Leave the runtime on the thread count ``vm`` runs fastest on here
    (:mod:`simpletvm.runtime.threads`), timed on ``inputs`` or random ones of
    ``input_specs``; returns the choice and the timings behind it."""
    import tvm

    from simpletvm.runtime.evaluation import random_inputs
    from simpletvm.runtime.threads import choose_runtime_threads

    if inputs is None:
        inputs = [tvm.runtime.tensor(a, target.device()) for a in random_inputs(input_specs)]
    main = vm["main"]
    return choose_runtime_threads(lambda: main(*inputs), target.host_cores())


def as_numpy(result: Any) -> np.ndarray | list[np.ndarray]:
    """NumPy arrays of a call's outputs: views of the tensors the VM returned when they
    are in this process's memory (no call reuses them while a view lives; TVM's
    ``numpy()`` copy costs microseconds a call), copies of remote ones and of types NumPy cannot
    view (bfloat16, float8: ``numpy()`` gives them ml_dtypes' types)."""
    if hasattr(result, "numpy"):
        if result.device.dlpack_device_type() == DLPACK_CPU:  # an RPC tensor's differs
            try:
                return np.from_dlpack(result)
            except RuntimeError:  # "Unsupported dtype in DLTensor"
                pass
        return result.numpy()
    items = [as_numpy(item) for item in result]
    return items[0] if len(items) == 1 else items
