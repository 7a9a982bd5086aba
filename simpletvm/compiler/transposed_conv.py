"""Transposed convolutions as direct ones: zeros between the inputs, a flipped kernel.

TVM legalizes ``conv{1,2,3}d_transpose`` only channels-first, into one kernel that first
flips the weights and swaps their in and out axes, then convolves. Marked layout-free,
those weights meet a fault in MetaSchedule's layout rewrite: it takes the flip-and-swap
block for a cache read and gives the original weights the layout suggested for the
swapped ones. With one output channel that layout drops the input-channel axis, and
every input channel is multiplied by the last channel's weights
(docs/decisions/001-transposed-convolutions.md). Channels-last transposed convolutions,
which ``ConvertLayout`` or an importer may leave, are not legalized at all.

Here each transposed convolution with constant weights and one group becomes what it
computes: the input with ``stride - 1`` zeros between its elements, padded, convolved
with the flipped kernel (transformed once, here, in numpy) at stride 1, channels-last
(``NHWC``/``OHWI``; ``NDHWC``/``DHWIO``; 1-D as 2-D of height 1). The convolution reads
its weights directly, as every other convolution does, and gets the NHWC convolutions'
default schedules, Winograd form and search space. The arithmetic is TVM's own
legalization's: it convolves the zero-filled input too.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from simpletvm.relax_ir import cancel_permutations, count_calls, static_shape

TRANSPOSED = {
    "relax.nn.conv1d_transpose": 1,
    "relax.nn.conv2d_transpose": 2,
    "relax.nn.conv3d_transpose": 3,
}


def direct_transposed_convs(mod):
    """``mod`` with every rewritable transposed convolution as a direct one, and how
    many were rewritten. Grouped ones and those with weights computed at run time are
    left as they are."""
    from tvm import relax

    if not any(count_calls(mod, op) for op in TRANSPOSED):
        return mod, 0
    # weights permuted by an importer (OHWI -> IOHW) become constants to transform
    mod = cancel_permutations(mod)
    rewriter = _make_rewriter()(mod)
    for gvar, func in list(mod.functions_items()):
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
    if not rewriter.rewritten:
        return mod, 0
    return cancel_permutations(rewriter.builder_.get()), rewriter.rewritten


def direct_transposed_convs_pass():
    """:func:`direct_transposed_convs` as a module pass."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="DirectTransposedConvs")
    def rewrite(mod, _context):
        return direct_transposed_convs(mod)[0]

    return rewrite


def direct_kernel(weight: np.ndarray, kernel_layout: str) -> np.ndarray:
    """A transposed convolution's weights (``kernel_layout``, e.g. ``IOHW``) as the
    direct convolution's: out and in swapped, each window flipped, channels-last
    (``O`` + spatial + ``I``)."""
    spatial = [axis for axis in kernel_layout if axis not in "IO"]
    io_first = np.transpose(weight, [kernel_layout.index(a) for a in ["I", "O", *spatial]])
    flipped = np.flip(io_first, axis=tuple(range(2, io_first.ndim)))
    return np.ascontiguousarray(np.moveaxis(flipped, 0, -1))  # (O, *window, I)


def direct_padding(kernel, stride, dilation, padding, output_padding):
    """For one spatial axis: ``(crop_before, crop_after, pad_before, pad_after)`` of the
    zero-filled input (``size * stride`` long: ``stride - 1`` zeros after each element)
    so that a stride-1 convolution gives the transposed convolution's output."""
    window = dilation * (kernel - 1) + 1
    pad_before, pad_after = padding
    before = window - 1 - pad_before
    after = window - 1 - pad_after + output_padding - (stride - 1)
    return max(0, -before), max(0, -after), max(0, before), max(0, after)


def _rewrite(builder, call, ndim: int, weight):
    """The direct form of ``call`` (a transposed convolution of ``ndim`` spatial axes,
    whose weights are ``weight``), emitted with ``builder``; None when it is not
    rewritable."""
    import tvm
    from tvm import relax

    data = call.args[0]
    attrs = call.attrs
    data_layout, out_layout = str(attrs.data_layout), str(attrs.out_layout)
    shape = static_shape(data)
    if (
        int(attrs.groups) != 1
        or not isinstance(weight, tvm.ir.expr.GenericConst)
        or shape is None
        or len(data_layout) != ndim + 2
        or len(str(attrs.kernel_layout)) != ndim + 2
    ):
        return None
    spatial = [axis for axis in data_layout if axis not in "NC"]
    kernel = direct_kernel(weight.value.numpy(), str(attrs.kernel_layout))
    strides = [int(s) for s in attrs.strides]
    dilation = [int(d) for d in attrs.dilation]
    output_padding = [int(p) for p in attrs.output_padding]
    pads = [int(p) for p in attrs.padding]  # all befores, then all afters
    last = ["N", *spatial, "C"]
    x = _permuted(builder, data, data_layout, "".join(last))
    sizes = [shape[data_layout.index(a)] for a in spatial]
    if ndim == 1:  # as 2-D of height 1
        x = builder.emit(relax.op.reshape(x, [shape[0], 1, sizes[0], -1]))
        kernel = kernel[:, None]
        sizes, strides, dilation = [1, *sizes], [1, *strides], [1, *dilation]
        output_padding, pads = [0, *output_padding], [0, pads[0], 0, pads[1]]
    dims = len(sizes)
    x = _zero_filled(builder, x, sizes, strides)
    crops, conv_pads = [], ([0] * dims, [0] * dims)
    for i in range(dims):
        crop_b, crop_a, pad_b, pad_a = direct_padding(
            kernel.shape[1 + i],
            strides[i],
            dilation[i],
            (pads[i], pads[dims + i]),
            output_padding[i],
        )
        crops.append((crop_b, sizes[i] * strides[i] - crop_a))
        conv_pads[0][i], conv_pads[1][i] = pad_b, pad_a
    if any(b or e != sizes[i] * strides[i] for i, (b, e) in enumerate(crops)):
        x = builder.emit(
            relax.op.strided_slice(
                x, list(range(1, dims + 1)), [b for b, _ in crops], [e for _, e in crops]
            )
        )
    out_dtype = attrs.out_dtype if attrs.out_dtype not in (None, "", "None") else None
    padding = conv_pads[0] + conv_pads[1]
    if dims == 2:
        y = relax.op.nn.conv2d(
            x,
            relax.const(kernel),
            padding=padding,
            dilation=dilation,
            data_layout="NHWC",
            kernel_layout="OHWI",
            out_dtype=out_dtype,
        )
    else:
        y = relax.op.nn.conv3d(
            x,
            relax.const(np.ascontiguousarray(np.moveaxis(kernel, 0, -1))),  # DHWIO
            padding=padding,
            dilation=dilation,
            data_layout="NDHWC",
            kernel_layout="DHWIO",
            out_dtype=out_dtype,
        )
    y = builder.emit(y)
    if ndim == 1:
        y_shape = static_shape(y)
        y = builder.emit(relax.op.reshape(y, [y_shape[0], y_shape[2], y_shape[3]]))
    return _permuted(builder, y, "".join(last), out_layout)


def _zero_filled(builder, x, sizes: list[int], strides: list[int]):
    """``x`` (channels-last) with ``stride - 1`` zeros after each element of each
    spatial axis: each axis gets a unit axis beside it, padded to the stride, merged."""
    from tvm import relax

    if all(s == 1 for s in strides):
        return x
    shape = static_shape(x)
    batch, channels = shape[0], shape[-1]
    spread = [batch]
    for size in sizes:
        spread += [size, 1]
    x = builder.emit(relax.op.reshape(x, [*spread, channels]))
    width = [0, 0]
    for stride in strides:
        width += [0, 0, 0, stride - 1]
    x = builder.emit(relax.op.nn.pad(x, [*width, 0, 0]))
    merged = [size * stride for size, stride in zip(sizes, strides)]
    return builder.emit(relax.op.reshape(x, [batch, *merged, channels]))


def _permuted(builder, x, layout: str, to: str):
    from tvm import relax

    if layout == to:
        return x
    return builder.emit(relax.op.permute_dims(x, [layout.index(a) for a in to]))


@cache
def _make_rewriter():
    """The mutator class, defined on first use so importing this module needs no TVM."""
    import tvm
    from tvm import relax

    @relax.expr_functor.mutator
    class TransposedConvRewriter(relax.PyExprMutator):
        def __init__(self, mod):
            super().__init__(mod)
            self.rewritten = 0

        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            if not isinstance(call.op, tvm.ir.Op) or call.op.name not in TRANSPOSED:
                return call
            weight = call.args[1]
            if isinstance(weight, relax.Var):
                weight = self.lookup_binding(weight)
            direct = _rewrite(self.builder_, call, TRANSPOSED[call.op.name], weight)
            if direct is None:
                return call
            self.rewritten += 1
            return direct

    return TransposedConvRewriter
