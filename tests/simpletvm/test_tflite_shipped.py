"""TFLite models as converters and vendors ship them, each compared with TFLite's own
interpreter (or, for MediaPipe's custom operators, which it cannot run, a numpy port of
MediaPipe's kernels) on the same input. Every model is made here; nothing is downloaded."""

from __future__ import annotations

import struct
import warnings

import numpy as np
import pytest

from simpletvm import BenchmarkingContext, ModelImportError, SimpleTVM

IMAGE = (1, 16, 16, 3)


def run_simpletvm(store, path, x):
    return (
        SimpleTVM(BenchmarkingContext("cpu", store=store))
        .from_model(path)
        .build(records=None)
        .run(x)
    )


def run_tflite(flatbuffer: bytes, x):
    import tensorflow as tf

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tf.lite.Interpreter's deprecation notice
        interpreter = tf.lite.Interpreter(model_content=flatbuffer)
    interpreter.allocate_tensors()
    interpreter.set_tensor(interpreter.get_input_details()[0]["index"], x)
    interpreter.invoke()
    return interpreter.get_tensor(interpreter.get_output_details()[0]["index"])


def operators(flatbuffer: bytes) -> list[str]:
    """Builtin names (custom codes for custom operators) of the main subgraph's operators."""
    import tflite
    from tflite.BuiltinOperator import BuiltinOperator

    names = {code: name for name, code in vars(BuiltinOperator).items() if name.isupper()}
    model = tflite.Model.GetRootAsModel(flatbuffer, 0)
    subgraph = model.Subgraphs(0)
    found = []
    for index in range(subgraph.OperatorsLength()):
        code = model.OperatorCodes(subgraph.Operators(index).OpcodeIndex())
        builtin = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
        found.append(
            code.CustomCode().decode() if builtin == BuiltinOperator.CUSTOM else names[builtin]
        )
    return found


def image(seed: int = 1, shape=IMAGE):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def representative_images():
    for seed in range(16):
        yield [image(100 + seed)]


@pytest.fixture(scope="module")
def keras_cnn():
    """Conv, depthwise conv, 1x1 conv and dense; 80% of each layer's weights are zeros,
    like a pruned model, so the converter's sparsity optimization keeps them sparse."""
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input(IMAGE[1:])
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.DepthwiseConv2D(3, padding="same", activation="relu")(x)
    x = keras.layers.Conv2D(16, 1, activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(8)(x))
    rng = np.random.default_rng(0)
    for layer in model.layers:
        weights = layer.get_weights()
        if weights:
            weights[0] = np.where(rng.random(weights[0].shape) < 0.2, weights[0] * 3, 0)
            layer.set_weights(weights)
    return model


def convert(
    keras_model, *optimizations, float16=False, representative=False, integer_io=False
) -> bytes:
    import tensorflow as tf

    from simpletvm._process.native_output import redirected

    converter = tf.lite.TFLiteConverter.from_keras_model(keras_model)
    converter.optimizations = list(optimizations)
    if float16:
        converter.target_spec.supported_types = [tf.float16]
    if representative:
        converter.representative_dataset = representative_images
    if integer_io:
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = converter.inference_output_type = tf.int8
    with redirected("/dev/null", fds=(1, 2)):
        return converter.convert()


def assert_close(actual, expected, steps: float = 1e-5):
    """Equal within ``steps`` of the expected output's largest magnitude."""
    np.testing.assert_allclose(actual, expected, rtol=0, atol=steps * np.abs(expected).max())


@pytest.mark.slow
def test_float16_weights_match_tflite(store, tmp_path, keras_cnn):
    import tensorflow as tf

    flatbuffer = convert(keras_cnn, tf.lite.Optimize.DEFAULT, float16=True)
    assert operators(flatbuffer).count("DEQUANTIZE") == 5
    path = tmp_path / "float16.tflite"
    path.write_bytes(flatbuffer)
    x = image()
    assert_close(run_simpletvm(store, path, x), run_tflite(flatbuffer, x))


@pytest.mark.slow
def test_sparse_float16_weights_are_densified(store, tmp_path, keras_cnn):
    """DENSIFY feeding DEQUANTIZE: TVM's frontend alone raises a TypeError here."""
    import tensorflow as tf

    flatbuffer = convert(
        keras_cnn, tf.lite.Optimize.EXPERIMENTAL_SPARSITY, tf.lite.Optimize.DEFAULT, float16=True
    )
    ops = operators(flatbuffer)
    assert ops.count("DENSIFY") == 4 and ops.count("DEQUANTIZE") >= 4
    path = tmp_path / "sparse_float16.tflite"
    path.write_bytes(flatbuffer)
    x = image()
    assert_close(run_simpletvm(store, path, x), run_tflite(flatbuffer, x))


@pytest.mark.slow
def test_block_sparse_weights_read_by_the_kernel_are_densified(store, tmp_path):
    """Float32 weights pruned in 1x4 blocks stay sparse and go straight to FULLY_CONNECTED
    (no DENSIFY): the block map and the dense block dimension must be decoded."""
    import keras
    import tensorflow as tf
    import tflite

    keras.utils.set_random_seed(1)
    inputs = keras.Input((64,))
    model = keras.Model(
        inputs, keras.layers.Dense(16)(keras.layers.Dense(32, activation="relu")(inputs))
    )
    rng = np.random.default_rng(1)
    for layer in model.layers[1:]:
        kernel, bias = layer.get_weights()  # (in, out); TFLite blocks 4 inputs of an output
        keep = np.repeat(rng.random((kernel.shape[0] // 4, kernel.shape[1])) < 0.3, 4, axis=0)
        layer.set_weights([np.where(keep, kernel, 0).astype("float32"), bias])
    flatbuffer = convert(model, tf.lite.Optimize.EXPERIMENTAL_SPARSITY)
    subgraph = tflite.Model.GetRootAsModel(flatbuffer, 0).Subgraphs(0)
    sparse = [subgraph.Tensors(i).Sparsity() for i in range(subgraph.TensorsLength())]
    assert sum(s is not None and s.BlockMapLength() == 1 for s in sparse) == 2
    assert "DENSIFY" not in operators(flatbuffer)
    path = tmp_path / "block_sparse.tflite"
    path.write_bytes(flatbuffer)
    x = image(shape=(1, 64))
    assert_close(run_simpletvm(store, path, x), run_tflite(flatbuffer, x))


@pytest.mark.slow
def test_int8_post_training_quantization(store, tmp_path, keras_cnn):
    """QUANTIZE, int8 kernels, DEQUANTIZE: within one step of the output's quantization."""
    import tensorflow as tf
    import tflite

    flatbuffer = convert(keras_cnn, tf.lite.Optimize.DEFAULT, representative=True)
    ops = operators(flatbuffer)
    assert ops[0] == "QUANTIZE" and ops[-1] == "DEQUANTIZE" and "CONV_2D" in ops
    subgraph = tflite.Model.GetRootAsModel(flatbuffer, 0).Subgraphs(0)
    dequantized = subgraph.Tensors(int(subgraph.Operators(len(ops) - 1).Inputs(0)))
    step = float(dequantized.Quantization().Scale(0))
    path = tmp_path / "int8.tflite"
    path.write_bytes(flatbuffer)
    x = image()
    expected = run_tflite(flatbuffer, x)
    assert np.abs(expected).max() > 10 * step  # the comparison is not within noise
    np.testing.assert_allclose(run_simpletvm(store, path, x), expected, rtol=0, atol=step * 1.001)


@pytest.mark.slow
def test_fully_integer_model(store, tmp_path, keras_cnn):
    """int8 in, int8 out: equal within one quantization step."""
    import tensorflow as tf

    flatbuffer = convert(keras_cnn, tf.lite.Optimize.DEFAULT, representative=True, integer_io=True)
    assert "QUANTIZE" not in operators(flatbuffer)
    path = tmp_path / "full_int8.tflite"
    path.write_bytes(flatbuffer)
    x = np.random.default_rng(2).integers(-128, 128, IMAGE).astype("int8")
    expected = run_tflite(flatbuffer, x)
    actual = run_simpletvm(store, path, x)
    assert actual.dtype == np.int8 and np.ptp(expected.astype(int)) > 20
    assert np.abs(actual.astype(int) - expected.astype(int)).max() <= 1


@pytest.mark.slow
@pytest.mark.parametrize("integer_io", [False, True])
def test_quantized_outputs_are_held_to_one_step(store, tmp_path, keras_cnn, integer_io):
    """evaluate()'s answers against TFLite's own int8 run: a quantized output may be one
    quantization step off, relative to the reference's largest magnitude."""
    import tensorflow as tf
    import tflite

    from simpletvm.runtime.evaluation import random_inputs

    flatbuffer = convert(
        keras_cnn, tf.lite.Optimize.DEFAULT, representative=True, integer_io=integer_io
    )
    path = tmp_path / "quantized.tflite"
    path.write_bytes(flatbuffer)
    stvm = SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(path)
    answers = stvm.build(records=None).check_answers()
    expected = run_tflite(flatbuffer, random_inputs(stvm.model.inputs)[0])
    if integer_io:  # int8 out: the step is one unit of the output
        step = 1.0
    else:  # float out, through DEQUANTIZE: the step is the scale of what it reads
        subgraph = tflite.Model.GetRootAsModel(flatbuffer, 0).Subgraphs(0)
        last = subgraph.Operators(subgraph.OperatorsLength() - 1)
        step = float(subgraph.Tensors(int(last.Inputs(0))).Quantization().Scale(0))
    assert answers["reference"] == "tflite"
    assert answers["tolerance"] == pytest.approx(step / np.abs(expected.astype(float)).max())
    assert answers["tolerance"] > 1e-3  # looser than a float32 output's
    assert answers["max_rel_error"] <= answers["tolerance"]


# -- buffers after the flatbuffer ---------------------------------------------------------


def with_buffers_after_the_flatbuffer(flatbuffer: bytes) -> bytes:
    """The same model with every buffer's data and every operator's custom options moved
    after the flatbuffer (16-byte aligned), found through ``Buffer.offset``/``size`` and
    ``Operator.large_custom_options_offset``/``size``, as the converter writes models
    over 2 GB."""
    from tensorflow.lite.tools import flatbuffer_utils

    model = flatbuffer_utils.read_model_from_bytearray(bytearray(flatbuffer))
    moved = []  # (object, offset attribute, data)
    for buffer in model.buffers:
        if buffer.data is not None and len(buffer.data):
            moved.append((buffer, "offset", bytes(buffer.data)))
            buffer.data, buffer.size = None, len(moved[-1][2])
    for operator in model.subgraphs[0].operators:
        if operator.customOptions is not None and len(operator.customOptions):
            moved.append((operator, "largeCustomOptionsOffset", bytes(operator.customOptions)))
            operator.customOptions = None
            operator.largeCustomOptionsSize = len(moved[-1][2])
    for holder, attribute, _ in moved:
        setattr(holder, attribute, 1 << 40)
    head = flatbuffer_utils.convert_object_to_bytearray(model)  # sizes the flatbuffer
    tail, position = b"", -(-len(head) // 16) * 16
    for holder, attribute, data in moved:
        setattr(holder, attribute, position + len(tail))
        tail += data + bytes(-len(data) % 16)
    packed = flatbuffer_utils.convert_object_to_bytearray(model)
    assert len(packed) == len(head)  # the offsets only changed value
    return packed + bytes(position - len(packed)) + tail


@pytest.mark.slow
def test_buffers_stored_after_the_flatbuffer(store, tmp_path, keras_cnn):
    import tflite

    flatbuffer = with_buffers_after_the_flatbuffer(convert(keras_cnn))
    model = tflite.Model.GetRootAsModel(flatbuffer, 0)
    buffers = [model.Buffers(i) for i in range(model.BuffersLength())]
    assert sum(b.Offset() > 1 and b.DataLength() == 0 for b in buffers) >= 8
    path = tmp_path / "offset_buffers.tflite"
    path.write_bytes(flatbuffer)
    x = image()
    expected = run_tflite(flatbuffer, x)
    assert np.abs(expected).max() > 0
    assert_close(run_simpletvm(store, path, x), expected)


# -- MediaPipe's custom operators -----------------------------------------------------------


def transpose_conv_options(same: bool, stride: tuple[int, int]) -> bytes:
    """TfLiteTransposeConvParams {padding (1 SAME, 2 VALID), stride_width, stride_height}."""
    return struct.pack("<3i", 1 if same else 2, stride[1], stride[0])


def pool_options(same: bool, stride: tuple[int, int], size: tuple[int, int]) -> bytes:
    """TfLitePoolParams {padding, stride_w, stride_h, filter_w, filter_h, activation,
    computed padding (4 ints)}."""
    return struct.pack(
        "<10i", 1 if same else 2, stride[1], stride[0], size[1], size[0], 0, 0, 0, 0, 0
    )


def custom_operator_code(model, code: str) -> int:
    from tensorflow.lite.python import schema_py_generated as schema

    opcode = schema.OperatorCodeT()
    opcode.builtinCode = opcode.deprecatedBuiltinCode = schema.BuiltinOperator.CUSTOM
    opcode.customCode, opcode.version = code, 1
    model.operatorCodes.append(opcode)
    return len(model.operatorCodes) - 1


def as_custom_operator(operator, opcode_index: int, inputs, options: bytes):
    operator.opcodeIndex, operator.inputs = opcode_index, list(inputs)
    operator.builtinOptionsType, operator.builtinOptions = 0, None
    operator.customOptions, operator.customOptionsFormat = list(options), 0


def mediapipe_transpose_conv_bias(x, weights_ohwi, bias, stride, same):
    """MediaPipe's Convolution2DTransposeBias kernel: SAME crops
    ``filter - (in - 1) % stride - 1`` (so 13 from 7 at stride 2 with a 3x3 filter, where
    TFLite's TRANSPOSE_CONV gives 14), the smaller half before."""
    batch, height, width, _ = x.shape
    channels, kernel_h, kernel_w, _ = weights_ohwi.shape
    crops = [
        max(0, k - (size - 1) % stride - 1) if same else 0
        for size, k in ((height, kernel_h), (width, kernel_w))
    ]
    out_h = stride * (height - 1) + kernel_h - crops[0]
    out_w = stride * (width - 1) + kernel_w - crops[1]
    out = np.broadcast_to(bias, (batch, out_h, out_w, channels)).astype("float32")
    for y, x_ in np.ndindex(height, width):
        for fy, fx in np.ndindex(kernel_h, kernel_w):
            oy, ox = y * stride - crops[0] // 2 + fy, x_ * stride - crops[1] // 2 + fx
            if 0 <= oy < out_h and 0 <= ox < out_w:
                out[:, oy, ox] += x[:, y, x_] @ weights_ohwi[:, fy, fx].T
    return out


@pytest.mark.slow
@pytest.mark.parametrize(
    "size,padding,stride", [(8, "same", 2), (7, "same", 2), (7, "valid", 2), (7, "same", 1)]
)
def test_convolution2d_transpose_bias(store, tmp_path, size, padding, stride):
    """A TRANSPOSE_CONV with its bias (checked against the interpreter), rewritten into
    MediaPipe's custom operator (checked against MediaPipe's kernel, which equals the
    interpreter's TRANSPOSE_CONV except for SAME on odd sizes)."""
    import keras
    from tensorflow.lite.tools import flatbuffer_utils

    keras.utils.set_random_seed(3)
    inputs = keras.Input((size, size, 4), batch_size=1)
    layer = keras.layers.Conv2DTranspose(5, 3, strides=stride, padding=padding)
    model = keras.Model(inputs, layer(inputs))
    bias = np.linspace(-1, 1, 5).astype("float32")
    layer.set_weights([layer.get_weights()[0], bias])
    original = convert(model)
    assert operators(original) == ["TRANSPOSE_CONV"]
    x = image(shape=(1, size, size, 4))
    builtin = tmp_path / "transpose_conv.tflite"
    builtin.write_bytes(original)
    expected = run_tflite(original, x)
    assert_close(run_simpletvm(store, builtin, x), expected)

    rewritten = flatbuffer_utils.read_model_from_bytearray(bytearray(original))
    operator = rewritten.subgraphs[0].operators[0]
    assert len(operator.inputs) == 4  # output shape, weights (OHWI), data, bias
    _, weights, data, bias_index = operator.inputs
    as_custom_operator(
        operator,
        custom_operator_code(rewritten, "Convolution2DTransposeBias"),
        [data, weights, bias_index],
        transpose_conv_options(padding == "same", (stride, stride)),
    )
    path = tmp_path / "transpose_conv_bias.tflite"
    path.write_bytes(flatbuffer_utils.convert_object_to_bytearray(rewritten))
    assert operators(path.read_bytes()) == ["Convolution2DTransposeBias"]
    reference = mediapipe_transpose_conv_bias(
        x, layer.get_weights()[0].transpose(2, 0, 1, 3), bias, stride, padding == "same"
    )
    if reference.shape == expected.shape:
        assert_close(reference, expected)
    assert_close(run_simpletvm(store, path, x), reference)


def mediapipe_argmax_pool(x, size, stride, same):
    """MediaPipe's MaxPoolingWithArgmax2D kernel, loop for loop."""
    batch, height, width, channels = x.shape
    outs, pads = [], []
    for extent, k, s in zip((height, width), size, stride):
        out = (extent + s - 1) // s if same else (extent - k + s) // s
        outs.append(out)
        pads.append(max(((out - 1) * s + k - extent) // 2, 0))
    pooled = np.zeros((batch, *outs, channels), "float32")
    indices = np.zeros_like(pooled)
    for n, oy, ox, c in np.ndindex(pooled.shape):
        y0, x0 = oy * stride[0] - pads[0], ox * stride[1] - pads[1]
        best, best_y, best_x = np.finfo("float32").min, 0, 0
        for fy in range(max(0, -y0), min(size[0], height - y0)):
            for fx in range(max(0, -x0), min(size[1], width - x0)):
                if x[n, y0 + fy, x0 + fx, c] > best:
                    best, best_y, best_x = x[n, y0 + fy, x0 + fx, c], fy, fx
        pooled[n, oy, ox, c] = best
        indices[n, oy, ox, c] = best_y * size[1] + best_x + np.float32(0.1)
    return pooled, indices


def mediapipe_unpool(values, indices, size, stride):
    """MediaPipe's MaxUnpooling2D kernel, loop for loop."""
    batch, height, width, channels = values.shape
    out_h, out_w = height * size[0], width * size[1]
    pad_h = max(((height - 1) * stride[0] + size[0] - out_h) // 2, 0)
    pad_w = max(((width - 1) * stride[1] + size[1] - out_w) // 2, 0)
    out = np.zeros((batch, out_h, out_w, channels), "float32")
    for n, y, x, c in np.ndindex(values.shape):
        index = int(indices[n, y, x, c])
        oy, ox = y * stride[0] - pad_h + index // size[1], x * stride[1] - pad_w + index % size[1]
        if 0 <= oy < out_h and 0 <= ox < out_w:
            out[n, oy, ox, c] = values[n, y, x, c]
    return out


def argmax_pool_unpool_model(shape, size, stride, same) -> bytes:
    """x -> MaxPoolingWithArgmax2D -> (pooled, indices) -> MaxUnpooling2D -> y, written
    from scratch; outputs y and the indices."""
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils

    pooled_shape = mediapipe_argmax_pool(np.zeros(shape, "float32"), size, stride, same)[0].shape
    unpooled_shape = (shape[0], pooled_shape[1] * size[0], pooled_shape[2] * size[1], shape[3])
    model = schema.ModelT()
    model.version, model.operatorCodes, model.buffers = 3, [], [schema.BufferT()]
    subgraph = schema.SubGraphT()
    subgraph.tensors = []
    for name, tensor_shape in (
        ("x", shape),
        ("pooled", pooled_shape),
        ("indices", pooled_shape),
        ("y", unpooled_shape),
    ):
        tensor = schema.TensorT()
        tensor.name, tensor.shape, tensor.type, tensor.buffer = name, list(tensor_shape), 0, 0
        subgraph.tensors.append(tensor)
    options = pool_options(same, stride, size)
    pool, unpool = schema.OperatorT(), schema.OperatorT()
    as_custom_operator(pool, custom_operator_code(model, "MaxPoolingWithArgmax2D"), [0], options)
    pool.outputs = [1, 2]
    as_custom_operator(unpool, custom_operator_code(model, "MaxUnpooling2D"), [1, 2], options)
    unpool.outputs = [3]
    subgraph.operators, subgraph.inputs, subgraph.outputs = [pool, unpool], [0], [3, 2]
    model.subgraphs = [subgraph]
    return flatbuffer_utils.convert_object_to_bytearray(model)


@pytest.mark.parametrize(
    "shape,size,stride,same",
    [
        ((1, 8, 8, 3), (2, 2), (2, 2), True),
        ((1, 7, 9, 2), (2, 2), (2, 2), True),
        ((1, 9, 9, 2), (3, 3), (2, 2), False),
    ],
)
def test_max_pooling_with_argmax_and_unpooling(store, tmp_path, shape, size, stride, same):
    path = tmp_path / "argmax_unpool.tflite"
    path.write_bytes(argmax_pool_unpool_model(shape, size, stride, same))
    assert operators(path.read_bytes()) == ["MaxPoolingWithArgmax2D", "MaxUnpooling2D"]
    x = image(shape=shape)
    pooled, indices = mediapipe_argmax_pool(x, size, stride, same)
    unpooled, found_indices = run_simpletvm(store, path, x)
    np.testing.assert_allclose(found_indices, indices, atol=1e-6)
    np.testing.assert_allclose(unpooled, mediapipe_unpool(pooled, indices, size, stride), atol=1e-6)
    assert np.count_nonzero(unpooled) >= pooled.size // 2  # the maxima came back


def test_custom_options_stored_after_the_flatbuffer(store, tmp_path):
    import tflite

    flatbuffer = with_buffers_after_the_flatbuffer(
        argmax_pool_unpool_model((1, 8, 8, 3), (2, 2), (2, 2), True)
    )
    operator = tflite.Model.GetRootAsModel(flatbuffer, 0).Subgraphs(0).Operators(0)
    assert operator.CustomOptionsLength() == 0 and operator.LargeCustomOptionsOffset() > 1
    path = tmp_path / "argmax_unpool.tflite"
    path.write_bytes(flatbuffer)
    x = image(shape=(1, 8, 8, 3))
    pooled, indices = mediapipe_argmax_pool(x, (2, 2), (2, 2), True)
    unpooled, _ = run_simpletvm(store, path, x)
    np.testing.assert_allclose(
        unpooled, mediapipe_unpool(pooled, indices, (2, 2), (2, 2)), atol=1e-6
    )


# -- what cannot be imported -------------------------------------------------------------


def test_unsupported_operators_are_named_with_count_and_first_node(tmp_path):
    """Two of a custom operator and one builtin TVM has no converter for: each named once,
    with its count and the output tensor of its first node."""
    from tensorflow.lite.python import schema_py_generated as schema
    from tensorflow.lite.tools import flatbuffer_utils

    from simpletvm.models import import_model

    model = schema.ModelT()
    model.version, model.operatorCodes, model.buffers = 3, [], [schema.BufferT()]
    relu, update = schema.OperatorCodeT(), schema.OperatorCodeT()
    relu.builtinCode = relu.deprecatedBuiltinCode = schema.BuiltinOperator.RELU
    update.builtinCode = schema.BuiltinOperator.DYNAMIC_UPDATE_SLICE
    update.deprecatedBuiltinCode = schema.BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES
    model.operatorCodes += [relu, update]
    warp = custom_operator_code(model, "FancyWarp")
    subgraph = schema.SubGraphT()
    subgraph.tensors = []
    for name in ("x", "a", "warped_1", "warped_2", "y"):
        tensor = schema.TensorT()
        tensor.name, tensor.shape, tensor.type, tensor.buffer = name, [1, 4], 0, 0
        subgraph.tensors.append(tensor)
    subgraph.operators = []
    for opcode, inputs, output in ((0, [0], 1), (warp, [1], 2), (warp, [2], 3), (1, [3, 1, 0], 4)):
        operator = schema.OperatorT()
        operator.opcodeIndex, operator.inputs, operator.outputs = opcode, inputs, [output]
        subgraph.operators.append(operator)
    subgraph.inputs, subgraph.outputs = [0], [4]
    model.subgraphs = [subgraph]
    path = tmp_path / "custom.tflite"
    path.write_bytes(flatbuffer_utils.convert_object_to_bytearray(model))
    with pytest.raises(ModelImportError) as caught:
        import_model(path)
    message = str(caught.value)
    assert (
        "(TFLite, schema version 3): unsupported operators DYNAMIC_UPDATE_SLICE x1 "
        "(first: 'y'), FancyWarp (custom) x2 (first: 'warped_1')"
    ) in message
    assert "RELU" not in message and "ONNX" in message and "builtin operators only" in message
