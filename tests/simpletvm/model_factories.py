"""Small models the tests build themselves: nothing is downloaded."""

from __future__ import annotations

import numpy as np


def make_tiny_cnn_onnx(path, image_size: int = 32, seed: int = 0):
    """conv-relu-conv-relu-pool-dense in ONNX: tunable, and fast to tune."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    weights = [
        numpy_helper.from_array((rng.standard_normal((16, 3, 3, 3)) * 0.2).astype("float32"), "W1"),
        numpy_helper.from_array((rng.standard_normal((32, 16, 3, 3)) * 0.1).astype("float32"), "W2"),
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
        nodes, "tiny_cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, image_size, image_size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(path))
    return path
