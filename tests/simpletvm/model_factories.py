"""Small models the tests build themselves: nothing is downloaded."""

from __future__ import annotations

from simpletvm.testing import tiny_cnn_onnx as make_tiny_cnn_onnx  # noqa: F401 - shared


def make_residual_pad_block_keras(
    size: int = 16, channels: int = 16, out_channels: int = 24, seed: int = 0
):
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
        name="pad_channels",
    )(inputs)
    h = keras.layers.ReLU()(keras.layers.Add()([h, shortcut]))
    outputs = keras.layers.Conv2D(8, 1, name="head")(h)
    return keras.Model(inputs, outputs)


def make_conv3x3_task(size: int, channels: int):
    """One tuning task as MetaSchedule extracts it: a 3x3 NHWC convolution, ``channels``
    in and out, on a ``size`` x ``size`` map (TOPI's ``conv2d_nhwc``; its block
    ``conv2d_nhwc``, output channel variable ``ff``)."""
    return make_conv_task(size, channels, channels, kernel=3)


def make_conv_task(size: int, in_channels: int, out_channels: int, *, kernel: int):
    """A ``kernel`` x ``kernel`` NHWC convolution task, stride 1, padded to keep the
    ``size`` x ``size`` map, as :func:`make_conv3x3_task`."""
    import tvm
    from tvm import te, topi

    x = te.placeholder((1, size, size, in_channels), name="x")
    w = te.placeholder((kernel, kernel, in_channels, out_channels), name="w")
    y = topi.nn.conv2d_nhwc(x, w, 1, kernel // 2, 1)
    return tvm.IRModule({"main": te.create_prim_func([x, w, y]).with_attr("global_symbol", "main")})


def make_matvec_task(inputs: int, outputs: int):
    """A classifier's dense layer at batch 1: ``(1, inputs) x (inputs, outputs)``."""
    import tvm
    from tvm import te, topi

    x = te.placeholder((1, inputs), name="x")
    w = te.placeholder((inputs, outputs), name="w")
    y = topi.matmul(x, w)
    return tvm.IRModule({"main": te.create_prim_func([x, w, y]).with_attr("global_symbol", "main")})


def with_cores(target, cores: int):
    """The CPU ``target`` (a ResolvedTarget) as a TVM target with ``cores`` cores: how
    the cores split a kernel must not hinge on this machine's count."""
    import tvm

    return tvm.target.Target({**target.tvm_target().export(), "num-cores": cores})


def make_expand_dims_tflite(path):
    """A TFLite flatbuffer written field by field (no converter): ``y = expand_dims(x,
    1)``, ``x`` float32 (1, 4), ``y`` (1, 1, 4). TVM 0.27's conversion of EXPAND_DIMS
    fails on any model (it passes Relax's ``expand_dims`` an argument it does not take)."""
    import numpy as np
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils

    model = schema.ModelT()
    model.version = 3
    code = schema.OperatorCodeT()
    code.builtinCode = code.deprecatedBuiltinCode = schema.BuiltinOperator.EXPAND_DIMS
    model.operatorCodes = [code]
    axis = schema.BufferT()
    axis.data = list(np.array([1], "int32").tobytes())
    model.buffers = [schema.BufferT(), axis]
    subgraph = schema.SubGraphT()
    subgraph.tensors = []
    for name, shape, dtype, buffer in (
        ("x", [1, 4], schema.TensorType.FLOAT32, 0),
        ("axis", [1], schema.TensorType.INT32, 1),
        ("y", [1, 1, 4], schema.TensorType.FLOAT32, 0),
    ):
        tensor = schema.TensorT()
        tensor.name, tensor.shape, tensor.type, tensor.buffer = name, shape, dtype, buffer
        subgraph.tensors.append(tensor)
    operator = schema.OperatorT()
    operator.opcodeIndex, operator.inputs, operator.outputs = 0, [0, 1], [2]
    subgraph.operators = [operator]
    subgraph.inputs, subgraph.outputs = [0], [2]
    model.subgraphs = [subgraph]
    path.write_bytes(flatbuffer_utils.convert_object_to_bytearray(model))
    return path
