"""Fakes for tests and examples: a tiny model, and a builder and runner that stand in
for compiling and timing candidates, so a TuningJob runs its real search in seconds.

Nothing here is downloaded or converted: the model is written with the ``onnx`` package.
"""

from __future__ import annotations

import random
from functools import lru_cache
from pathlib import Path

import numpy as np


def tiny_cnn_onnx(path: str | Path, image_size: int = 32, seed: int = 0) -> Path:
    """conv-relu-conv-relu-pool-dense in ONNX (3x``image_size``² in, 10 out): tunable, and
    fast to tune."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weights = [
        numpy_helper.from_array((rng.standard_normal((16, 3, 3, 3)) * 0.2).astype("float32"), "W1"),
        numpy_helper.from_array(
            (rng.standard_normal((32, 16, 3, 3)) * 0.1).astype("float32"), "W2"
        ),
        numpy_helper.from_array((rng.standard_normal((10, 32)) * 0.1).astype("float32"), "W3"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "W2"], ["c2"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("Gemm", ["f", "W3"], ["y"], transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "tiny_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, image_size, image_size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))
    return Path(path)


def fake_builder():
    """A MetaSchedule builder that builds nothing and reports every candidate built."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.builder import BuilderResult, PyBuilder

    @derived_object
    class FakeBuilder(PyBuilder):
        def build(self, build_inputs):
            return [BuilderResult("fake-artifact", None) for _ in build_inputs]

    return FakeBuilder()


@lru_cache(maxsize=1)
def _future_class():
    """A MetaSchedule runner future that holds its result already (made on first use:
    importing TVM waits until a fake is asked for)."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import PyRunnerFuture

    @derived_object
    class FakeFuture(PyRunnerFuture):
        def __init__(self, result):
            super().__init__()
            self._result = result

        def done(self) -> bool:
            return True

        def result(self):
            return self._result

    return FakeFuture


def finished_future(result):
    """A finished runner future holding ``result`` (a ``RunnerResult``): what a fake
    runner returns."""
    return _future_class()(result)


def fake_runner(seed: int = 0, failing: float = 0.0):
    """A MetaSchedule runner that times nothing: each candidate gets a latency drawn from
    ``seed`` (1-10 ms), or fails with probability ``failing``."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerResult

    draw = random.Random(seed)

    @derived_object
    class FakeRunner(PyRunner):
        def run(self, runner_inputs):
            results = []
            for _ in runner_inputs:
                if draw.random() < failing:
                    results.append(RunnerResult(None, "fake runner: this candidate fails"))
                else:
                    results.append(RunnerResult([draw.uniform(1e-3, 1e-2)], None))
            return [finished_future(result) for result in results]

    return FakeRunner()
