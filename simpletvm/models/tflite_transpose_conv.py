"""TFLite's transposed convolutions (TRANSPOSE_CONV, CONV_3D_TRANSPOSE) as Relax.

TFLite computes one at the output shape its first input names. A Keras model exported
with its batch left unknown computes that shape at run time (SHAPE, STRIDED_SLICE, PACK
of the input's batch), which TVM's frontend reads as a constant and fails on. With the
input shapes fixed the output shape is known at import: the output tensor's sizes where
the flatbuffer has them, the input's batch, and for any other unknown size Keras's own
(``in * stride`` for SAME, ``(in - 1) * stride + max(kernel, stride)`` for VALID).

TFLite's kernels crop the full transposed convolution, ``(in - 1) * stride + kernel``
wide, from the padding TFLite computes for the output size (``ComputePaddingHeightWidth``:
SAME pads ``(ceil(out / stride) - 1) * stride + kernel - out`` in all, the smaller half
first), and leave zeros (plus the bias) where the output reaches past it, as it does for
a kernel narrower than its stride: Relax's ``output_padding``.
"""

from __future__ import annotations


def axis_padding(size: int, kernel: int, stride: int, out: int, same: bool) -> tuple[int, int, int]:
    """(padding before, padding after, output padding) of one spatial axis: ``size`` in,
    ``out`` out, ``kernel`` the dilated kernel's extent."""
    before = max((-(-out // stride) - 1) * stride + kernel - out, 0) // 2 if same else 0
    after = (size - 1) * stride + kernel - before - out
    if -after >= stride:
        raise ValueError(
            f"an output size of {out} is out of reach of a transposed convolution of "
            f"size {size}, kernel {kernel} and stride {stride}"
        )
    return before, max(after, 0), max(-after, 0)


def output_shape(
    known: list[int],
    batch: int,
    sizes: tuple[int, ...],
    kernel: tuple[int, ...],
    strides: tuple[int, ...],
    same: bool,
    channels: int,
) -> tuple[int, ...]:
    """The output shape (batch, spatial..., channels): ``known`` sizes where positive
    (the output tensor's, -1 where unknown), else the input's batch, Keras's output size
    of each spatial axis, and the kernel's output channels."""
    derived = [batch]
    for size, extent, stride in zip(sizes, kernel, strides):
        derived.append(size * stride if same else (size - 1) * stride + max(extent, stride))
    derived.append(channels)
    if len(known) != len(derived):
        return tuple(derived)
    return tuple(k if k > 0 else d for k, d in zip(known, derived))


def _paddings(sizes, kernel, strides, out_sizes, same):
    pads = [axis_padding(*axis, same) for axis in zip(sizes, kernel, strides, out_sizes)]
    before, after, extra = zip(*pads)
    return (*before, *after), extra


def transpose_conv2d(data, weights_ohwi, sizes, kernel, strides, same, out_shape, out_dtype):
    """TRANSPOSE_CONV of NHWC ``data`` and OHWI weights at ``out_shape`` (NHWC), without
    its bias (:func:`simpletvm.models.tflite.transpose_convs_nchw` moves it to NCHW, the
    layout Relax lowers)."""
    from tvm import relax

    padding, extra = _paddings(sizes, kernel, strides, out_shape[1:3], same)
    return relax.op.nn.conv2d_transpose(
        data,
        relax.op.permute_dims(weights_ohwi, axes=(3, 0, 1, 2)),
        strides=strides,
        padding=padding,
        output_padding=extra,
        data_layout="NHWC",
        kernel_layout="IOHW",
        out_dtype=out_dtype,
    )


def transpose_conv3d(data, weights_dhwoi, sizes, kernel, strides, dilation, same, out_shape):
    """CONV_3D_TRANSPOSE of NDHWC ``data`` and DHWOI weights at ``out_shape`` (NDHWC),
    without its bias: computed in NCDHW, the only layout Relax lowers it from (and
    ConvertLayout does not convert it)."""
    from tvm import relax

    dilated = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
    padding, extra = _paddings(sizes, dilated, strides, out_shape[1:4], same)
    out = relax.op.nn.conv3d_transpose(
        relax.op.permute_dims(data, axes=(0, 4, 1, 2, 3)),
        relax.op.permute_dims(weights_dhwoi, axes=(4, 3, 0, 1, 2)),
        strides=strides,
        padding=padding,
        output_padding=extra,
        dilation=dilation,
        data_layout="NCDHW",
        kernel_layout="IODHW",
    )
    return relax.op.permute_dims(out, axes=(0, 2, 3, 4, 1))
