"""Matrix-vector products get their own schedule space: only batch-1 dense layers are
marked, every point of the space computes the same numbers, and a tuned model built
from it still matches.

Models are built with Relax's BlockBuilder (no TensorFlow); weights from seeded rngs.
"""

from __future__ import annotations

import numpy as np
import pytest

from simpletvm.gemv import RULE
from simpletvm.lowering import compile_fused, extract_tasks, fuse
from simpletvm.targets import resolve_target


def dense_model(batch: int, k: int, n: int, *, transposed: bool = False, bias: bool = True,
                seed: int = 0):
    """x @ W (+ b), W a constant (stored N x K when ``transposed``), one Relax function."""
    from tvm import relax

    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((n, k) if transposed else (k, n)).astype("float32")
    offset = rng.standard_normal(n).astype("float32")
    x = relax.Var("x", relax.TensorType((batch, k), "float32"))
    builder = relax.BlockBuilder()
    with builder.function("main", [x]):
        with builder.dataflow():
            w = relax.const(weight)
            if transposed:
                w = builder.emit(relax.op.permute_dims(w))
            y = builder.emit(relax.op.matmul(x, w))
            if bias:
                y = builder.emit(relax.op.add(y, relax.const(offset)))
            out = builder.emit_output(y)
        builder.emit_func_output(out)
    reference = (weight.T if transposed else weight), (offset if bias else np.zeros(n, "float32"))
    return builder.get(), reference


@pytest.fixture(scope="module")
def cpu():
    return resolve_target("cpu")


def marked_tasks(mod, target) -> list:
    return [task for task in extract_tasks(fuse(mod, target), target)
            if RULE in str(task.dispatched[0])]


@pytest.mark.parametrize("transposed", [False, True])
def test_a_batch_one_dense_layer_is_marked_for_the_gemv_space(cpu, transposed):
    mod, _ = dense_model(1, 64, 40, transposed=transposed)
    assert len(marked_tasks(mod, cpu)) == 1


def test_a_matrix_product_of_several_rows_keeps_the_general_space(cpu):
    mod, _ = dense_model(4, 64, 40)
    tasks = extract_tasks(fuse(mod, cpu), cpu)
    assert tasks and not marked_tasks(mod, cpu)


def test_every_sampled_gemv_schedule_computes_the_product(cpu):
    import tvm
    from tvm.s_tir import meta_schedule as ms

    mod, (weight, offset) = dense_model(1, 96, 40, bias=False)
    (task,) = marked_tasks(mod, cpu)
    x = np.random.default_rng(1).standard_normal((1, 96)).astype("float32")
    expected = x @ weight
    seen = set()
    for seed in range(3):
        context = ms.TuneContext(mod=task.dispatched[0], target=cpu.tvm_target(),
                                 space_generator="post-order-apply",
                                 search_strategy="replay-trace", rand_state=seed, num_threads=1)
        (schedule,) = context.space_generator.generate_design_space(task.dispatched[0])
        trace = str(schedule.trace)  # this space, not MetaSchedule's general tiling:
        assert "n=3" in trace and "tiling_structure" not in trace
        seen.add(str(schedule.trace.decisions))
        for postproc in context.space_generator.postprocs:
            assert postproc.apply(schedule)
        kernel = tvm.compile(schedule.mod, target=cpu.tvm_target())
        out = tvm.runtime.tensor(np.zeros((1, 40), "float32"))
        kernel(tvm.runtime.tensor(x), tvm.runtime.tensor(weight), out)
        np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-4)
    assert len(seen) > 1  # the seeds sampled different tiles


def gemm_onnx(path, k: int, n: int, seed: int = 0):
    """An ONNX model of one Gemm (a dense layer as exporters write it: weights N x K,
    ``transB=1``, a bias), batch 1."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weight = rng.standard_normal((n, k)).astype("float32")
    offset = rng.standard_normal(n).astype("float32")
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "W", "b"], ["y"], transB=1)], "dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, k])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, n])],
        [numpy_helper.from_array(weight, "W"), numpy_helper.from_array(offset, "b")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path, weight, offset


def test_a_tuned_dense_layer_built_from_its_records_matches(tmp_path):
    """A few trials of the real search on the marked task, then the build applies them."""
    from simpletvm import BenchmarkingContext, SimpleTVM

    path, weight, offset = gemm_onnx(tmp_path / "dense.onnx", 128, 50)
    stvm = SimpleTVM(BenchmarkingContext("cpu", store=tmp_path / "store")).from_model(str(path))
    tasks = extract_tasks(stvm.fused_module, stvm.target)
    assert any(RULE in str(task.dispatched[0]) for task in tasks)
    stvm.autotune(trials=4, batch_size=2, population=16, transfer_learning=False, seed=0)
    assert stvm.tuning_summary["trials"] >= 1
    x = np.random.default_rng(2).standard_normal((1, 128)).astype("float32")
    out = stvm.build(records="run").run(x)
    build = next(step for step in stvm.context.steps if step["step"] == "build")
    assert build["records_applied"] >= 1
    np.testing.assert_allclose(out, x @ weight.T + offset, rtol=1e-4, atol=1e-4)
