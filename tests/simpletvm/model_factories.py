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


def make_residual_pad_block_keras(size: int = 16, channels: int = 16, out_channels: int = 24,
                                  seed: int = 0):
    """A BlazeFace-style block whose shortcut is padded to more channels, then a head:
    ``relu(conv1x1(depthwise3x3(x)) + pad_channels(x))`` -> conv1x1.

    Fused as imported, the 1x1 convolution, its bias, the channel pad and the residual add
    and ReLU are one operator that MetaSchedule (TVM 0.27) cannot schedule
    (``reverse-compute-at`` fails), as in a shipped face detector's blocks.
    """
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(seed)
    inputs = keras.Input((size, size, channels), name="x")
    h = keras.layers.DepthwiseConv2D(3, padding="same")(inputs)
    h = keras.layers.Conv2D(out_channels, 1)(h)
    shortcut = keras.layers.Lambda(
        lambda t: tf.pad(t, [[0, 0], [0, 0], [0, 0], [0, out_channels - channels]]),
        name="pad_channels")(inputs)
    h = keras.layers.ReLU()(keras.layers.Add()([h, shortcut]))
    outputs = keras.layers.Conv2D(8, 1, name="head")(h)
    return keras.Model(inputs, outputs)
