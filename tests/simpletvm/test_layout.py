"""NHWC on CPU: the ONNX clean-up before TVM's frontend is exact, and after it the whole
network converts to NHWC with no transpose left inside.

Small models are built with ``onnx.helper`` (nothing is downloaded); outputs are checked
against onnxruntime on the same input, and the real-model tests against Keras.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from simpletvm.compiler.layout import conv2d_layouts, to_nhwc
from simpletvm.compiler.lowering import fuse
from simpletvm.models import import_model
from simpletvm.models.onnx_rewrite import rewrite_for_import
from simpletvm.relax_ir import count_calls
from simpletvm.targets import resolve_target

IMAGE = 16


def block_model(opset: int, *, nhwc_input: bool = False, seed: int = 0):
    """conv -> Clip(0, 6) -> Pad -> depthwise conv (stride 2) -> Clip(-1, 1) -> 1x1 conv
    -> residual Add -> Clip(max only) -> MaxPool -> GlobalAveragePool -> Flatten -> Gemm.

    Clip bounds and Pad pads are attributes before opset 11, initializers at opset 11-16
    and ``Constant`` nodes from 17 on. With ``nhwc_input`` the input is NHWC behind a
    Transpose, as tf2onnx writes TensorFlow models.
    """
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def weight(*shape, scale=0.3):
        return (rng.standard_normal(shape) * scale).astype("float32")

    inits = {
        "W1": weight(8, 3, 3, 3),
        "B1": weight(8),
        "W2": weight(8, 1, 3, 3),
        "W3": weight(8, 8, 1, 1),
        "B3": weight(8),
        "W4": weight(10, 8),
        "B4": weight(10),
    }
    nodes = []
    constants: dict[str, np.ndarray] = {}

    def const(name, value):
        value = np.asarray(value)
        if opset >= 17:
            nodes.append(
                helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))
            )
        else:
            constants[name] = value
        return name

    def clip(x, y, low, high):
        if opset < 11:
            attrs = {k: v for k, v in (("min", low), ("max", high)) if v is not None}
            nodes.append(helper.make_node("Clip", [x], [y], **attrs))
        else:
            lo = const(f"{y}_lo", np.float32(low)) if low is not None else ""
            hi = const(f"{y}_hi", np.float32(high)) if high is not None else ""
            nodes.append(helper.make_node("Clip", [x, lo, hi], [y]))

    def pad(x, y, pads):
        if opset < 11:
            nodes.append(helper.make_node("Pad", [x], [y], pads=pads, mode="constant"))
        else:
            nodes.append(
                helper.make_node("Pad", [x, const(f"{y}_pads", np.array(pads, "int64"))], [y])
            )

    if nhwc_input:
        graph_input = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, IMAGE, IMAGE, 3])
        nodes.append(helper.make_node("Transpose", ["x"], ["x_nchw"], perm=[0, 3, 1, 2]))
        x = "x_nchw"
    else:
        graph_input = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, IMAGE, IMAGE])
        x = "x"
    nodes.append(helper.make_node("Conv", [x, "W1", "B1"], ["c1"], pads=[1, 1, 1, 1]))
    clip("c1", "r1", 0.0, 6.0)
    pad("r1", "p1", [0, 0, 0, 0, 0, 0, 1, 1])  # tf2onnx's stride-2 "same" padding
    nodes.append(helper.make_node("Conv", ["p1", "W2"], ["d1"], group=8, strides=[2, 2]))
    clip("d1", "r2", -1.0, 1.0)
    nodes.append(helper.make_node("Conv", ["r2", "W3", "B3"], ["c3"]))
    nodes.append(helper.make_node("Add", ["c3", "r2"], ["a"]))
    clip("a", "m", None, 0.75)
    nodes.append(helper.make_node("MaxPool", ["m"], ["mp"], kernel_shape=[2, 2], strides=[2, 2]))
    nodes.append(helper.make_node("GlobalAveragePool", ["mp"], ["g"]))
    nodes.append(helper.make_node("Flatten", ["g"], ["f"]))
    nodes.append(helper.make_node("Gemm", ["f", "W4", "B4"], ["y"], transB=1))
    initializers = [numpy_helper.from_array(v, k) for k, v in {**inits, **constants}.items()]
    graph = helper.make_graph(
        nodes,
        "block",
        [graph_input],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
        initializers,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)
    onnx.checker.check_model(model)
    return model


def input_for(model, seed: int = 1):
    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return np.random.default_rng(seed).standard_normal(dims).astype("float32")


def onnxruntime_output(model, x):
    import onnxruntime

    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, {model.graph.input[0].name: x})[0]


def tvm_output(mod, x):
    import tvm
    from tvm import relax

    executable = tvm.compile(mod, target="llvm")
    return relax.VirtualMachine(executable, tvm.cpu())["main"](tvm.runtime.tensor(x)).numpy()


def op_types(model) -> Counter:
    return Counter(node.op_type for node in model.graph.node)


def fused_block_names(mod) -> Counter:
    """Names of the blocks of the PrimFuncs of a fused module, each counted once per
    PrimFunc that has it."""
    import re

    from tvm import tirx

    names: Counter = Counter()
    for _, func in mod.functions_items():
        if isinstance(func, tirx.PrimFunc):
            names.update(set(re.findall(r'T\.s?block\("([^"]+)"', func.script())))
    return names


# ---- the ONNX rewrite -----------------------------------------------------------------
@pytest.mark.parametrize("opset", [10, 11, 17])
def test_rewrite_is_exact_and_valid(opset):
    import onnx

    model = block_model(opset)
    original = model.SerializeToString()
    rewritten, stats = rewrite_for_import(model)
    assert model.SerializeToString() == original  # the argument is left alone
    onnx.checker.check_model(rewritten, full_check=True)
    assert stats["clip"] == 3 and stats["pad"] == 1
    types = op_types(rewritten)
    assert types["Clip"] == 0 and types["Pad"] == 0
    # Clip(0, 6) -> Relu, Min; Clip(-1, 1) -> Max, Min; Clip(max only) -> Min
    assert (types["Relu"], types["Max"], types["Min"]) == (1, 1, 3)
    depthwise = next(n for n in rewritten.graph.node if n.input[0] == "r1")
    assert list(next(a for a in depthwise.attribute if a.name == "pads").ints) == [0, 0, 1, 1]
    x = input_for(model)
    # exact in real numbers; onnxruntime picks other kernels for the padded Conv
    np.testing.assert_allclose(
        onnxruntime_output(rewritten, x), onnxruntime_output(model, x), rtol=1e-6, atol=1e-6
    )


def test_rewrite_leaves_what_it_cannot_prove():
    """Pads with a non-zero value, on the channel axis or read by a non-Conv, and Clips
    with run-time bounds, stay as they are."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((4, 4, 3, 3), "float32"), "W")
    nodes = [
        helper.make_node("Pad", ["x", "pads_hw", "one"], ["p_value"]),
        helper.make_node("Conv", ["p_value", "W"], ["c1"]),
        helper.make_node("Pad", ["c1", "pads_c"], ["p_channel"]),
        helper.make_node("Slice", ["p_channel", "starts", "ends"], ["s"]),
        helper.make_node("Pad", ["s", "pads_hw"], ["p_shared"]),
        helper.make_node("Conv", ["p_shared", "W"], ["c2"]),
        helper.make_node("Relu", ["p_shared"], ["r"]),
        helper.make_node("Clip", ["c2", "bound", ""], ["y1"]),
        helper.make_node("Identity", ["r"], ["y2"]),
    ]
    inits = [
        w,
        numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], "int64"), "pads_hw"),
        numpy_helper.from_array(np.array([0, 1, 0, 0, 0, 1, 0, 0], "int64"), "pads_c"),
        numpy_helper.from_array(np.array(1.0, "float32"), "one"),
        numpy_helper.from_array(np.array([0], "int64"), "starts"),
        numpy_helper.from_array(np.array([4], "int64"), "ends"),
    ]
    graph = helper.make_graph(
        nodes,
        "kept",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8]),
            helper.make_tensor_value_info("bound", TensorProto.FLOAT, []),
        ],
        [
            helper.make_tensor_value_info("y1", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("y2", TensorProto.FLOAT, None),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    rewritten, stats = rewrite_for_import(model)
    assert stats["pad"] == 0 and stats["clip"] == 0
    assert op_types(rewritten) == op_types(model)


def test_pad_folds_into_max_pool_of_a_relu_only():
    """Zero padding before a max pool equals the pool's own (-inf) padding when its input
    is never negative: Keras' ResNet50 stem (ReLU, ZeroPadding2D, MaxPool)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    pads = numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], "int64"), "pads")
    nodes = [
        helper.make_node("Relu", ["x"], ["r"]),
        helper.make_node("Pad", ["r", "pads"], ["p_relu"]),
        helper.make_node("MaxPool", ["p_relu"], ["y1"], kernel_shape=[3, 3], strides=[2, 2]),
        helper.make_node("Pad", ["x", "pads"], ["p_any"]),
        helper.make_node("MaxPool", ["p_any"], ["y2"], kernel_shape=[3, 3], strides=[2, 2]),
    ]
    graph = helper.make_graph(
        nodes,
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
        [
            helper.make_tensor_value_info("y1", TensorProto.FLOAT, [1, 4, 4, 4]),
            helper.make_tensor_value_info("y2", TensorProto.FLOAT, [1, 4, 4, 4]),
        ],
        [pads],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    rewritten, stats = rewrite_for_import(model)
    onnx.checker.check_model(rewritten, full_check=True)
    assert stats["pad"] == 1
    assert [n.input[0] for n in rewritten.graph.node if n.op_type == "MaxPool"] == ["r", "p_any"]
    import onnxruntime

    x = input_for(model)
    got, want = (
        onnxruntime.InferenceSession(m.SerializeToString()).run(None, {"x": x})
        for m in (rewritten, model)
    )
    for actual, expected in zip(got, want):
        np.testing.assert_array_equal(actual, expected)


def test_same_auto_pad_and_reshape_chains():
    """Conv auto_pad SAME_* becomes explicit pads; a reshape chain that ends in the shape it
    started from becomes an Identity, one that only moves 1-extent axes a Transpose."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((6, 3, 3, 3)).astype("float32"), "W")
    nodes = [
        helper.make_node("Conv", ["x", "W"], ["c_upper"], auto_pad="SAME_UPPER", strides=[2, 2]),
        helper.make_node("Conv", ["x", "W"], ["c_lower"], auto_pad="SAME_LOWER", strides=[2, 2]),
        helper.make_node("Add", ["c_upper", "c_lower"], ["a"]),
        helper.make_node("GlobalAveragePool", ["a"], ["g"]),  # (1, 6, 1, 1)
        helper.make_node("Reshape", ["g", "nhwc"], ["t"]),  # (1, 1, 1, 6)
        helper.make_node("Squeeze", ["t"], ["s"]),  # (6,)
        helper.make_node("Reshape", ["s", "nchw"], ["back"]),  # (1, 6, 1, 1)
        helper.make_node("Mul", ["back", "g"], ["y"]),
    ]
    inits = [
        w,
        numpy_helper.from_array(np.array([1, 1, 1, 6], "int64"), "nhwc"),
        numpy_helper.from_array(np.array([1, 6, 1, 1], "int64"), "nchw"),
    ]
    graph = helper.make_graph(
        nodes,
        "chains",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 1, 1])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    rewritten, stats = rewrite_for_import(model)
    onnx.checker.check_model(rewritten, full_check=True)
    # the first Reshape becomes a Transpose, the second reads past it and the Squeeze
    assert stats["auto_pad"] == 2 and stats["reshape"] == 2 and stats["removed"] == 2
    types = op_types(rewritten)
    assert types["Reshape"] == types["Squeeze"] == types["Transpose"] == 0
    assert types["Identity"] == 1
    pads = {
        n.output[0]: list(next(a for a in n.attribute if a.name == "pads").ints)
        for n in rewritten.graph.node
        if n.op_type == "Conv"
    }
    assert pads == {"c_upper": [0, 0, 1, 1], "c_lower": [1, 1, 0, 0]}
    x = input_for(model)
    np.testing.assert_allclose(
        onnxruntime_output(rewritten, x), onnxruntime_output(model, x), rtol=1e-6, atol=1e-6
    )


# ---- import, NHWC conversion, fuse --------------------------------------------------
@pytest.mark.parametrize(
    "opset,nhwc_input,transposes", [(10, False, 1), (11, True, 0), (17, False, 1), (17, True, 0)]
)
def test_nhwc_conversion_matches_onnxruntime(opset, nhwc_input, transposes):
    """All convolutions and the pool go NHWC; left is the transpose of an NCHW input
    (none for a tf2onnx-style NHWC input, whose Transpose cancels)."""
    model = block_model(opset, nhwc_input=nhwc_input)
    imported = import_model(model)
    assert "R.call_tir" not in imported.mod.script()  # Clip and Pad imported as Relax ops
    converted, stats = to_nhwc(imported.mod)
    assert stats["conv2d_nchw"] == 3 and stats["conv2d_converted"] == 3
    assert conv2d_layouts(converted) == {"NHWC": 3}
    assert count_calls(converted, "relax.permute_dims") == stats["permute_dims_after"] == transposes
    assert count_calls(converted, "relax.nn.max_pool2d") == 1
    x = input_for(model)
    expected = onnxruntime_output(model, x)
    np.testing.assert_allclose(tvm_output(converted, x), expected, rtol=1e-4, atol=1e-5)


def test_fuse_converts_on_cpu_only_when_asked():
    target = resolve_target("cpu")
    mod = import_model(block_model(17)).mod
    nhwc = fused_block_names(fuse(mod, target))
    nchw = fused_block_names(fuse(mod, target, layout=None))
    assert not any("nchw" in name.lower() for name in nhwc)
    assert any("nhwc" in name.lower() for name in nhwc)
    assert sum(count for name, count in nhwc.items() if "transpose" in name) == 1  # the input
    assert any("nchw" in name.lower() for name in nchw)
    with pytest.raises(ValueError, match="layout"):
        fuse(mod, target, layout="NCHW")


def test_nhwc_module_is_left_as_is():
    """A module with no NCHW convolution (a TFLite import) comes out the same object."""
    from tvm import relax

    x = relax.Var("x", relax.TensorType((1, 8, 8, 4), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(
                relax.op.nn.conv2d(
                    x,
                    relax.const(np.ones((3, 3, 4, 4), "float32")),
                    padding=1,
                    data_layout="NHWC",
                    kernel_layout="HWIO",
                )
            )
            out = bb.emit_output(relax.op.nn.relu(y))
        bb.emit_func_output(out)
    mod = bb.get()
    converted, stats = to_nhwc(mod)
    assert converted is mod
    assert stats["conv2d_nchw"] == 0 and stats["permute_dims_after"] == 0


# ---- real converted models ------------------------------------------------------------
def _raw_transposes(model) -> int:
    """Transposes left when TVM's own import (no rewrite) goes through the same NHWC
    conversion: what the rewrite saves."""
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    dims = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    raw = from_onnx(
        onnx.shape_inference.infer_shapes(model), shape_dict={model.graph.input[0].name: dims}
    )
    return to_nhwc(raw)[1]["permute_dims_after"]


@pytest.mark.slow
def test_mobilenet_v1_builtin_converts_fully(tmp_path):
    """MobileNet v1 goes through tf2onnx: 28 NCHW convolutions, all NHWC, no transpose
    left (TVM's import as is leaves 54)."""
    import onnx

    from simpletvm.models.zoo import build_keras_model

    imported = import_model("mobilenet", cache_dir=tmp_path, image_size=32)
    assert imported.details["route"] == "onnx"
    converted, stats = to_nhwc(imported.mod)
    assert (stats["conv2d_nchw"], stats["conv2d_converted"]) == (28, 28)
    assert (stats["permute_dims_before"], stats["permute_dims_after"]) == (1, 0)
    (cached,) = tmp_path.glob("*.onnx")
    assert _raw_transposes(onnx.load(str(cached))) == 54
    x = np.random.default_rng(0).standard_normal((1, 32, 32, 3)).astype("float32")
    expected = build_keras_model("mobilenet", image_size=32)(x).numpy()
    np.testing.assert_allclose(tvm_output(converted, x), expected, atol=1e-5)


@pytest.mark.slow
def test_mobilenet_v2_through_onnx_converts_fully():
    """The built-in MobileNetV2 as tf2onnx writes it: 52 convolutions, all NHWC, no
    transpose left (TVM's import as is leaves about 73: at least one per convolution;
    tf2onnx's graph varies by a transpose from one conversion to the next)."""
    import tensorflow as tf
    import tf2onnx

    from simpletvm.models.base import ONNX_OPSET
    from simpletvm.models.zoo import build_keras_model

    keras_model = build_keras_model("mobilenetv2", image_size=32, alpha=0.35)
    signature = [tf.TensorSpec((1, 32, 32, 3), tf.float32, name="input")]
    model, _ = tf2onnx.convert.from_keras(keras_model, input_signature=signature, opset=ONNX_OPSET)
    imported = import_model(model)
    converted, stats = to_nhwc(imported.mod)
    assert (stats["conv2d_nchw"], stats["conv2d_converted"]) == (52, 52)
    assert (stats["permute_dims_before"], stats["permute_dims_after"]) == (1, 0)
    assert _raw_transposes(model) >= stats["conv2d_converted"]
    x = np.random.default_rng(0).standard_normal((1, 32, 32, 3)).astype("float32")
    expected = keras_model(x).numpy()
    np.testing.assert_allclose(tvm_output(converted, x), expected, atol=1e-5)
