"""How candidates are timed: the cache modes, the choice per model, and the eviction
evaluator run by a real local runner."""

from __future__ import annotations

import numpy as np
import pytest

from simpletvm.tuning import timing
from simpletvm.tuning.options import TuningOptions


@pytest.mark.parametrize(
    "value, mode",
    [
        (True, "memory"),
        (False, "off"),
        ("auto", "auto"),
        ("l3", "l3"),
        ("memory", "memory"),
        ("model", "model"),
    ],
)
def test_cache_modes_and_the_old_switch_are_understood(value, mode):
    assert TuningOptions(cache_flush=value).cache_flush == mode


def test_an_unknown_cache_mode_is_named_with_the_choices():
    with pytest.raises(
        ValueError, match=r"unknown cache_flush 'l2'.*'auto', 'model', 'memory', 'l3'"
    ):
        TuningOptions(cache_flush="l2")


def test_timing_hot_allows_several_runs_per_measurement():
    assert TuningOptions(cache_flush="off", number=3).number == 3
    with pytest.raises(ValueError, match="cache_flush 'l3' .* needs number=1"):
        TuningOptions(cache_flush="l3", number=3)


@pytest.fixture
def l3_of_32_mb(monkeypatch):
    monkeypatch.setattr("simpletvm.hostinfo.cache_bytes", lambda: {2: 1 << 20, 3: 32 << 20})


def test_auto_streams_the_models_traffic_on_a_local_cpu():
    assert timing.resolve_cache_mode("auto", device_type="cpu", local=True) == "model"
    assert timing.resolve_cache_mode("l3", device_type="cpu", local=True) == "l3"


def test_a_remote_or_gpu_device_is_never_timed_with_the_eviction_kernels():
    assert timing.resolve_cache_mode("auto", device_type="cpu", local=False) == "memory"
    assert timing.resolve_cache_mode("l3", device_type="cpu", local=False) == "memory"
    assert timing.resolve_cache_mode("model", device_type="cpu", local=False) == "memory"
    assert timing.resolve_cache_mode("off", device_type="cpu", local=False) == "off"
    assert timing.resolve_cache_mode("auto", device_type="cuda", local=False) == "off"


@pytest.mark.parametrize(
    "model_mb, thread_mb",
    [
        (1, 1),  # a small model: as much as the "l3" mode, every core's L2 pushed out
        (46, 11.5),  # its own bytes, split over two buffers and two threads
        (300, 16),  # more than the L3 holds: as much as the "memory" mode
    ],
)
def test_the_model_mode_streams_the_models_bytes_between_the_other_modes(model_mb, thread_mb):
    sizes = {2: 1 << 20, 3: 32 << 20}
    assert timing.eviction_bytes("l3", 0, sizes, 2) == 1 << 20
    assert timing.eviction_bytes("memory", 0, sizes, 2) == 16 << 20
    assert timing.eviction_bytes("model", int(model_mb * (1 << 20)), sizes, 2) == int(
        thread_mb * (1 << 20)
    )


def test_model_weight_bytes_counts_each_tensor_constant_once():
    from tvm import relax

    weight = relax.const(np.ones((16, 3, 3, 3), "float32"))
    bias = relax.const(np.ones((3,), "float16"))
    x = relax.Var("x", relax.TensorType((1, 3, 3, 3), "float32"))
    builder = relax.BlockBuilder()
    with builder.function("main", [x]):
        y = builder.emit(relax.op.add(x, weight))
        z = builder.emit(relax.op.multiply(y, weight))
        out = builder.emit(relax.op.add(z, relax.op.astype(bias, "float32")))
        builder.emit_func_output(out)
    assert timing.model_weight_bytes(builder.get()) == 16 * 27 * 4 + 3 * 2
    # what one run keeps in the caches: those constants, and the storage the memory plan
    # gives main's tensors: y and z (z is computed from y, so both live at once) and the
    # cast bias; the returned output is allocated by its call, outside the plan
    activations = timing.planned_activation_bytes(builder.get())
    assert activations == 2 * 16 * 27 * 4 + 3 * 4
    assert timing.model_footprint_bytes(builder.get()) == 16 * 27 * 4 + 3 * 2 + activations


def test_the_memory_plan_counts_a_buffer_reused_by_tensors_that_never_live_at_once():
    from tvm import relax

    weight = relax.const(np.ones((64, 64), "float32"))
    x = relax.Var("x", relax.TensorType((64, 64), "float32"))
    builder = relax.BlockBuilder()
    with builder.function("main", [x]):
        value = x
        for op in (relax.op.add, relax.op.multiply, relax.op.add, relax.op.multiply):
            value = builder.emit(op(value, weight))
        builder.emit_func_output(value)
    # three tensors written before the output, in two buffers: the first's is free again
    # once the second is computed, and the third takes it
    assert timing.planned_activation_bytes(builder.get()) == 2 * 64 * 64 * 4


def test_activations_are_the_input_and_what_has_the_outputs_shape():
    import tvm

    data, weight, residual, out = (
        tvm.runtime.tensor(np.zeros(shape, "float32"))
        for shape in [(1, 8, 8, 4), (3, 3, 4, 4), (1, 8, 8, 4), (1, 8, 8, 4)]
    )
    assert timing.activations((data, weight, residual, out)) == [data, residual, out]
    assert timing.activations(()) == []


@pytest.mark.parametrize("mode", ["l3", "memory", "model"])
def test_the_local_runner_times_a_kernel_in_each_mode(tmp_path, mode):
    """Each mode's evaluator runs in MetaSchedule's local runner process, on the model's
    pool, and times the kernel like MetaSchedule's own does (the order of the modes is
    BENCHMARKS material: a timed assertion here would be flaky)."""
    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import TensorInfo
    from tvm.s_tir.meta_schedule.runner import RunnerInput

    source = te.placeholder((256, 64), "float32", name="source")
    total = te.reduce_axis((0, 256), name="row")
    sums = te.compute((64,), lambda j: te.sum(source[total, j], axis=total), name="sums")
    tvm.compile(te.create_prim_func([source, sums]), target={"kind": "llvm"}).export_library(
        str(tmp_path / "kernel.so")
    )
    options = TuningOptions(repeat=3)
    runner = ms.runner.LocalRunner(
        evaluator_config=timing.evaluator_config(options, mode),
        f_alloc_argument=timing.alloc_arguments,
        f_run_evaluator=timing.run_evaluator(mode, 8 << 20),
    )
    args = [TensorInfo("float32", [256, 64]), TensorInfo("float32", [64])]
    results = [
        future.result()
        for future in runner.run([RunnerInput(str(tmp_path / "kernel.so"), "cpu", args)] * 2)
    ]
    assert [result.error_msg for result in results] == [None, None]
    assert all(
        len(result.run_secs) == 3 and all(0 < float(s) < 0.01 for s in result.run_secs)
        for result in results
    )


def test_each_evicting_mode_has_an_evaluator_and_a_registered_preprocessor():
    import tvm

    evaluators = {mode: timing.run_evaluator(mode, 8 << 20) for mode in ("l3", "memory", "model")}
    assert all(e.func is timing.run_evaluator_evicting for e in evaluators.values())
    assert [e.args for e in evaluators.values()] == [("l3", 0), ("memory", 0), ("model", 8 << 20)]
    assert timing.run_evaluator("off") is timing.run_evaluator_as_configured
    assert timing.preprocessor("off") == ""
    names = [
        timing.preprocessor("l3"),
        timing.preprocessor("memory"),
        timing.preprocessor("model", 8 << 20),
        timing.preprocessor("model", 9 << 20),
    ]
    for name in names:
        assert tvm.get_global_func(name, allow_missing=True) is not None
    assert len(set(names)) == 4  # one per mode, and per model size
    # a remote device cannot run the eviction kernel: its "memory" is TVM's flush
    assert timing.evaluator_config(TuningOptions(), "memory").enable_cpu_cache_flush
    assert not timing.evaluator_config(TuningOptions(), "l3").enable_cpu_cache_flush


def test_the_memory_eviction_streams_the_l3_and_the_l3_one_each_cores_l2(monkeypatch):
    """What each preprocessor passes through the caches: a buffer read and one written,
    per thread of the pool, sized so that "memory" leaves no byte of the L3 to the timed
    kernel's arguments, "l3" none of the private caches, and "model" the model's bytes."""
    sizes = []

    def fake_kernel(threads, thread_bytes):
        sizes.append((threads, thread_bytes))
        return (lambda *buffers: None), []

    monkeypatch.setattr(timing, "_eviction_kernel", fake_kernel)
    monkeypatch.setattr("simpletvm.hostinfo.cache_bytes", lambda: {2: 1 << 20, 3: 32 << 20})
    monkeypatch.setattr(timing, "_runtime_threads", lambda: 2)
    timing._register_eviction.cache_clear()
    try:
        timing.preprocessor("memory")
        timing.preprocessor("l3")
        timing.preprocessor("model", 46 << 20)
        timing.preprocessor("memory")  # registered once per process
        timing.preprocessor("model", 46 << 20)
    finally:
        timing._register_eviction.cache_clear()
    assert sizes == [(2, 16 << 20), (2, 1 << 20), (2, 23 << 19)]


def test_candidate_arguments_are_filled_on_the_callers_thread_as_metaschedule_shapes_them():
    """Floating-point arguments get varied values in [-1, 1), integer ones zeros (a valid
    index whatever they index); one list of arguments per ``alloc_repeat``."""
    import tvm

    repeated = timing.alloc_arguments(
        tvm.cpu(),
        [["TENSOR", "float32", [64, 8]], ["TENSOR", "float16", [3]], ["TENSOR", "int32", [5]]],
        2,
    )
    assert len(repeated) == 2 and all(len(args) == 3 for args in repeated)
    weights, halves, indices = (arg.numpy() for arg in repeated[0])
    assert weights.shape == (64, 8) and weights.dtype == np.float32
    assert -1 <= weights.min() < -0.5 and 0.5 < weights.max() < 1
    assert halves.dtype == np.float16 and np.all(np.abs(halves) <= 1)
    assert indices.dtype == np.int32 and not indices.any()


def test_the_first_input_of_a_profile_stage_is_timed_twice():
    assert timing.warmed_up(["a", "b"]) == ["a", "a", "b"]
    assert timing.warmed_up([]) == []


def test_each_candidates_first_timed_runs_are_dropped():
    """A candidate's first runs after loading are slow for reasons the model never meets:
    the evaluator runs WARMUP_RUNS more than ``repeat`` and drops those, per argument set."""
    from types import SimpleNamespace

    class Module:
        entry_name = "main"

        def time_evaluator(self, func_name, dev, number, repeat, min_repeat_ms, f_preproc):
            self.asked = (func_name, number, repeat, f_preproc)
            warmup = [9.0] * timing.WARMUP_RUNS
            return lambda *args: SimpleNamespace(
                results=warmup + [float(args[0])] * (repeat - timing.WARMUP_RUNS)
            )

    module, device = Module(), SimpleNamespace(sync=lambda: None)
    config = timing.evaluator_config(TuningOptions(repeat=4), "memory")
    costs = timing.run_evaluator_as_configured(module, device, config, [[1], [2]])
    assert costs == [1.0] * 4 + [2.0] * 4
    assert module.asked == ("main", 1, 4 + timing.WARMUP_RUNS, timing.FLUSH_ARGUMENTS)
    assert timing.WARMUP_RUNS >= 1
