"""Transposed convolutions as direct ones (simpletvm.compiler.transposed_conv), and the
fault in TVM's layout rewrite that makes it necessary."""

import numpy as np
import pytest
import tvm
from tir_inspection import blocks_in_loops
from tvm import relax, s_tir
from tvm.s_tir import meta_schedule as ms
from tvm.script import tirx as T

from simpletvm.compiler.build import compile_fused
from simpletvm.compiler.lowering import fuse
from simpletvm.compiler.transposed_conv import direct_transposed_convs
from simpletvm.relax_ir import count_calls
from simpletvm.targets import resolve_target


# TOPI's conv2d_transpose_nchw of a (1, 4, 3, 3) input and one filter, as TVM legalizes
# it: the weights flipped and swapped by a block of their own, then the convolution
@T.prim_func(s_tir=True)
def one_filter_transposed_conv(
    A: T.Buffer((1, 4, 3, 3), "float32"),
    B: T.Buffer((4, 1, 2, 2), "float32"),
    compute: T.Buffer((1, 1, 4, 4), "float32"),
):
    T.func_attr({"layout_free_buffers": [1], "tirx.noalias": True})
    data_pad = T.sblock_alloc_buffer((1, 4, 5, 5))
    kernel_transform = T.sblock_alloc_buffer((1, 4, 2, 2))
    for i0, i1, i2, i3 in T.grid(1, 4, 5, 5):
        with T.sblock("data_pad"):
            v_i0, v_i1, v_i2, v_i3 = T.axis.remap("SSSS", [i0, i1, i2, i3])
            data_pad[v_i0, v_i1, v_i2, v_i3] = T.if_then_else(
                1 <= v_i2 and v_i2 < 4 and 1 <= v_i3 and v_i3 < 4,
                A[v_i0, v_i1, v_i2 - 1, v_i3 - 1],
                T.float32(0.0),
            )
    for o, i, h, w in T.grid(1, 4, 2, 2):
        with T.sblock("kernel_transform"):
            v_o, v_i, v_h, v_w = T.axis.remap("SSSS", [o, i, h, w])
            kernel_transform[v_o, v_i, v_h, v_w] = B[v_i, v_o, 1 - v_h, 1 - v_w]
    for b, c, h, w, dc, dh, dw in T.grid(1, 1, 4, 4, 4, 2, 2):
        with T.sblock("compute"):
            v_b, v_c, v_h, v_w, v_dc, v_dh, v_dw = T.axis.remap("SSSSRRR", [b, c, h, w, dc, dh, dw])
            with T.init():
                compute[v_b, v_c, v_h, v_w] = T.float32(0.0)
            compute[v_b, v_c, v_h, v_w] = (
                compute[v_b, v_c, v_h, v_w]
                + data_pad[v_b, v_dc, v_h + v_dh, v_w + v_dw]
                * kernel_transform[v_c, v_dc, v_dh, v_dw]
            )


def _run(func, args):
    lib = tvm.compile(tvm.IRModule({"main": func}), target="llvm")
    tensors = [tvm.runtime.tensor(a) for a in args]
    lib["main"](*tensors)
    return tensors[-1].numpy()


def test_tvms_layout_rewrite_still_drops_the_input_channels_of_a_one_filter_kernel():
    """TVM's RewriteLayout takes the weight-flipping block for a cache read and lays the
    weights out as the flipped ones: with one output channel the input-channel axis is
    lost. When this test fails, TVM is fixed: transposed_conv.py's rewrite may go
    (docs/decisions/001-transposed-convolutions.md)."""
    sch = s_tir.Schedule(tvm.IRModule({"main": one_filter_transposed_conv}), debug_mask=0)
    assert ms.postproc.RewriteLayout().apply(sch)
    rewritten = sch.mod["main"]
    preproc = [
        realize.block
        for realize, _ in blocks_in_loops(rewritten).values()
        if "meta_schedule.layout_rewrite_preproc" in (realize.block.annotations or {})
    ]
    assert len(preproc) == 1
    written = [int(r.extent) for r in preproc[0].writes[0].region]
    assert np.prod(written) < 4 * 1 * 2 * 2  # the packed weights lost an axis

    rng = np.random.default_rng(0)
    a = rng.standard_normal((1, 4, 3, 3)).astype("float32")
    b = rng.standard_normal((4, 1, 2, 2)).astype("float32")
    zeros = np.zeros((1, 1, 4, 4), "float32")
    right = _run(one_filter_transposed_conv, [a, b, zeros.copy()])
    wrong = _run(rewritten, [a, b, zeros.copy()])
    assert not np.allclose(wrong, right, rtol=1e-3, atol=1e-3)


def _transposed_module(ndim, in_shape, weight_shape, strides, padding, output_padding):
    """A Relax module of one channels-first transposed convolution with constant
    weights, as TVM's ONNX and TFLite frontends import it."""
    layouts = {1: ("NCW", "IOW"), 2: ("NCHW", "IOHW"), 3: ("NCDHW", "IODHW")}[ndim]
    op = {1: relax.op.nn.conv1d_transpose, 2: relax.op.nn.conv2d_transpose}.get(
        ndim, relax.op.nn.conv3d_transpose
    )
    weight = np.random.default_rng(1).standard_normal(weight_shape).astype("float32")
    x = relax.Var("x", relax.TensorType(in_shape, "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit(
                op(
                    x,
                    relax.const(weight),
                    strides=strides,
                    padding=padding,
                    output_padding=output_padding,
                    data_layout=layouts[0],
                    kernel_layout=layouts[1],
                )
            )
            out = bb.emit_output(y)
        bb.emit_func_output(out)
    return bb.get()


def _reference(mod, x):
    """The module built with TVM's own legalization and naive schedule."""
    executable = relax.build(relax.transform.LegalizeOps()(mod), "llvm")
    vm = relax.VirtualMachine(executable, tvm.cpu())
    return vm["main"](tvm.runtime.tensor(x)).numpy()


CASES = {
    # ndim, input, weights (in, out, window), strides, padding (befores, afters), output pad
    "2d-1-filter-k2-s2": (2, (1, 16, 6, 6), (16, 1, 2, 2), (2, 2), (0, 0, 0, 0), (0, 0)),
    "2d-1-filter-k3-s2-same": (2, (1, 8, 5, 5), (8, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    "2d-1-filter-k4-s2-same": (2, (1, 8, 4, 4), (8, 1, 4, 4), (2, 2), (1, 1, 1, 1), (0, 0)),
    "2d-7-filters-1x3-s2x1": (2, (1, 3, 5, 6), (3, 7, 1, 3), (2, 1), (0, 0, 0, 0), (1, 0)),
    "2d-3-filters-k3-s1-valid": (2, (1, 3, 7, 7), (3, 3, 3, 3), (1, 1), (0, 0, 0, 0), (0, 0)),
    "2d-2-filters-k2-s3-crop": (2, (1, 2, 4, 4), (2, 2, 2, 2), (3, 3), (1, 0, 1, 2), (0, 0)),
    "1d-1-filter-k2-s2": (1, (1, 8, 16), (8, 1, 2), (2,), (0, 0), (0,)),
    "3d-1-filter-k2-s2": (3, (1, 2, 3, 4, 4), (2, 1, 2, 2, 2), (2, 2, 2), (0,) * 6, (0, 0, 0)),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_a_transposed_convolution_becomes_a_direct_one_computing_the_same(case):
    mod = _transposed_module(*case)
    direct, rewritten = direct_transposed_convs(mod)
    assert rewritten == 1
    for name in ("conv1d_transpose", "conv2d_transpose", "conv3d_transpose"):
        assert count_calls(direct, f"relax.nn.{name}") == 0
    x = np.random.default_rng(2).standard_normal(case[1]).astype("float32")
    expected = _reference(mod, x)
    got = _reference(direct, x)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_a_one_filter_transposed_convolution_is_right_with_default_schedules():
    """Built as a model is, layout rewrite and default schedules included."""
    mod = _transposed_module(*CASES["2d-1-filter-k2-s2"])
    target = resolve_target("cpu")
    executable = compile_fused(fuse(mod, target), target)
    vm = relax.VirtualMachine(executable, tvm.cpu())
    x = np.random.default_rng(3).standard_normal((1, 16, 6, 6)).astype("float32")
    got = vm["main"](tvm.runtime.tensor(x)).numpy()
    np.testing.assert_allclose(got, _reference(mod, x), rtol=1e-4, atol=1e-5)


def test_a_grouped_transposed_convolution_is_left_to_tvm():
    mod = _transposed_module(2, (1, 4, 3, 3), (4, 1, 2, 2), (2, 2), (0,) * 4, (0, 0))
    call = mod["main"].body.blocks[0].bindings[0].value
    grouped = relax.op.nn.conv2d_transpose(
        call.args[0], call.args[1], strides=(2, 2), groups=2, kernel_layout="IOHW"
    )
    x = mod["main"].params[0]
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        out = bb.emit(grouped)
        bb.emit_func_output(out)
    assert direct_transposed_convs(bb.get())[1] == 0


def test_an_operator_tvm_cannot_lower_is_named_at_fusion():
    """A grouped channels-last transposed convolution: TVM legalizes none, and it is not
    rewritten; fusion names it instead of the build failing with a page of IR."""
    from simpletvm.errors import UnsupportedOperatorError

    weight = np.random.default_rng(1).standard_normal((4, 1, 2, 2)).astype("float32")
    x = relax.Var("x", relax.TensorType((1, 3, 3, 4), "float32"))
    bb = relax.BlockBuilder()
    with bb.function("main", [x]):
        out = bb.emit(
            relax.op.nn.conv2d_transpose(
                x,
                relax.const(weight),
                strides=(2, 2),
                groups=2,
                data_layout="NHWC",
                kernel_layout="IOHW",
            )
        )
        bb.emit_func_output(out)
    with pytest.raises(UnsupportedOperatorError, match=r"nn\.conv2d_transpose .*NHWC"):
        fuse(bb.get(), resolve_target("cpu"))


@pytest.mark.slow
def test_one_filter_transposed_convolutions_are_right_after_a_short_tune(tmp_path):
    """The layers that came out wrong, untuned and tuned, from Keras as users build them:
    a short tune's records built and compared with Keras."""
    import keras
    from keras import layers

    from simpletvm import BenchmarkingContext, SimpleTVM

    inputs = keras.Input((16, 16, 16))
    two_d = layers.Conv2DTranspose(1, 2, strides=2, padding="same")(inputs)
    three = layers.Conv2DTranspose(1, 3, strides=2, padding="same")(inputs)
    model = keras.Model(inputs, [two_d, three])
    x = np.random.default_rng(0).standard_normal((1, 16, 16, 16)).astype("float32")
    expected = [np.asarray(y) for y in model(x)]
    stvm = SimpleTVM(BenchmarkingContext("cpu", store=tmp_path)).from_model(model)
    stvm.autotune(trials=8, candidates_per_iteration=8, seed=0, population=64, genetic_iterations=1)
    for records in (None, "run"):
        got = stvm.build(records=records).run(x)
        for want, have in zip(expected, got):
            error = np.abs(have - want).max() / np.abs(want).max()
            assert error < 1e-4, (records, error)
