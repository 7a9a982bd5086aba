"""MediaPipe's custom TFLite operators as Relax expressions.

MediaPipe's vision models (hair and selfie segmentation, among others) carry three
custom operators that TFLite's interpreter runs only with MediaPipe's op resolver. Their
semantics follow MediaPipe's kernels (``mediapipe/util/tflite/operations/``); their
``custom_options`` are not FlexBuffers but the raw C structs of TFLite's
``builtin_op_data.h``, little-endian int32 fields:

- ``Convolution2DTransposeBias``: ``TfLiteTransposeConvParams`` {padding, stride_width,
  stride_height}; inputs data (NHWC), weights (OHWI), bias.
- ``MaxPoolingWithArgmax2D`` and ``MaxUnpooling2D``: ``TfLitePoolParams`` {padding,
  stride_width, stride_height, filter_width, filter_height, activation, ...}. The argmax
  indices are float32, each the position of the maximum inside its pooling window
  (``y * filter_width + x``, plus 0.1 so that truncation reads it back exactly), and
  unpooling writes each value at the position its index names.

``padding`` is ``TfLitePadding``: 1 SAME, 2 VALID.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

_SAME, _VALID = 1, 2


@dataclass(frozen=True)
class PoolParams:
    same: bool
    stride: tuple[int, int]  # (height, width)
    filter: tuple[int, int]
    activation: int = 0  # TfLiteFusedActivation, numbered like TFLite's ActivationFunctionType


def _padding(code: int, operator: str) -> bool:
    if code not in (_SAME, _VALID):
        raise ValueError(f"{operator}: padding {code} is neither SAME (1) nor VALID (2)")
    return code == _SAME


def transpose_conv_params(options: bytes) -> tuple[bool, tuple[int, int]]:
    """(same padding, (stride_h, stride_w)) from ``TfLiteTransposeConvParams``."""
    if len(options) < 12:
        raise ValueError(
            f"Convolution2DTransposeBias: custom_options hold {len(options)} "
            "bytes, not the 12 of TfLiteTransposeConvParams"
        )
    padding, stride_w, stride_h = struct.unpack_from("<3i", options)
    return _padding(padding, "Convolution2DTransposeBias"), (stride_h, stride_w)


def pool_params(options: bytes, operator: str) -> PoolParams:
    """``TfLitePoolParams`` from a custom operator's options."""
    if len(options) < 24:
        raise ValueError(
            f"{operator}: custom_options hold {len(options)} bytes, not the "
            "24 or more of TfLitePoolParams"
        )
    padding, stride_w, stride_h, filter_w, filter_h, activation = struct.unpack_from("<6i", options)
    return PoolParams(
        _padding(padding, operator), (stride_h, stride_w), (filter_h, filter_w), activation
    )


def _pool_padding(size: int, out: int, stride: int, filt: int) -> int:
    """TFLite's ``ComputePadding`` (dilation 1): the padding before the first window."""
    return max(((out - 1) * stride + filt - size) // 2, 0)


def transpose_conv_bias(
    data,
    weights_ohwi,
    bias,
    in_hw: tuple[int, int],
    kernel_hw: tuple[int, int],
    same: bool,
    stride: tuple[int, int],
):
    """``Convolution2DTransposeBias``: a transposed convolution cropped like TFLite's
    TRANSPOSE_CONV (SAME drops ``filter - (in - 1) % stride - 1`` rows, the smaller half
    first), plus the bias."""
    from tvm import relax

    pads = []
    for size, kernel, step in zip(in_hw, kernel_hw, stride):
        total = max(0, kernel - (size - 1) % step - 1) if same else 0
        pads.append((total // 2, total - total // 2))
    weights = relax.op.permute_dims(weights_ohwi, axes=(3, 0, 1, 2))  # OHWI -> IOHW
    out = relax.op.nn.conv2d_transpose(
        data,
        weights,
        strides=stride,
        padding=(pads[0][0], pads[1][0], pads[0][1], pads[1][1]),
        data_layout="NHWC",
        kernel_layout="IOHW",
    )
    return relax.op.add(out, bias)


def max_pool_with_argmax(data, shape: tuple[int, ...], params: PoolParams):
    """``MaxPoolingWithArgmax2D``: (max pool, float32 index of each maximum in its window).

    Each window offset is a strided slice of the input padded with the lowest float, so
    padding never wins; the maximum and its first position come from one stack of them.
    """
    from tvm import relax

    _, height, width, _ = shape
    outs, befores, afters = [], [], []
    for size, step, filt in zip((height, width), params.stride, params.filter):
        out = -(-size // step) if params.same else (size - filt + step) // step
        before = _pool_padding(size, out, step, filt)
        outs.append(out)
        befores.append(before)
        afters.append(max(0, (out - 1) * step + filt - before - size))
    padded = relax.op.nn.pad(
        data,
        [0, 0, befores[0], afters[0], befores[1], afters[1], 0, 0],
        pad_value=float(np.finfo(np.float32).min),
    )
    windows = []
    for fy in range(params.filter[0]):
        for fx in range(params.filter[1]):
            windows.append(
                relax.op.strided_slice(
                    padded,
                    axes=[1, 2],
                    begin=[fy, fx],
                    end=[
                        fy + (outs[0] - 1) * params.stride[0] + 1,
                        fx + (outs[1] - 1) * params.stride[1] + 1,
                    ],
                    strides=list(params.stride),
                )
            )
    stacked = relax.op.stack(windows, axis=0)
    pooled = relax.op.max(stacked, axis=0)
    indices = relax.op.add(
        relax.op.astype(relax.op.argmax(stacked, axis=0), "float32"), relax.const(0.1, "float32")
    )
    return pooled, indices


def max_unpooling(data, indices, shape: tuple[int, ...], params: PoolParams):
    """``MaxUnpooling2D``: zeros of ``filter`` times the input's height and width, each
    input value written where its window index points (later ones overwrite earlier,
    positions outside the output are dropped, as in MediaPipe's kernel)."""
    from tvm import relax

    batch, height, width, channels = shape
    out_h, out_w = height * params.filter[0], width * params.filter[1]
    pad_h = _pool_padding(out_h, height, params.stride[0], params.filter[0])
    pad_w = _pool_padding(out_w, width, params.stride[1], params.filter[1])
    total = batch * out_h * out_w * channels
    data_size = batch * height * width * channels

    def grid(values, axis):
        shape4 = [1, 1, 1, 1]
        shape4[axis] = len(values)
        return relax.const(np.asarray(values, "int64").reshape(shape4), "int64")

    index = relax.op.astype(indices, "int64")  # truncation, as the kernel's float -> int
    filter_w = relax.const(params.filter[1], "int64")
    out_y = relax.op.add(
        grid(np.arange(height) * params.stride[0] - pad_h, 1),
        relax.op.floor_divide(index, filter_w),
    )
    out_x = relax.op.add(
        grid(np.arange(width) * params.stride[1] - pad_w, 2), relax.op.floor_mod(index, filter_w)
    )
    zero = relax.const(0, "int64")
    inside = relax.op.logical_and(
        relax.op.logical_and(
            relax.op.greater_equal(out_y, zero), relax.op.less(out_y, relax.const(out_h, "int64"))
        ),
        relax.op.logical_and(
            relax.op.greater_equal(out_x, zero), relax.op.less(out_x, relax.const(out_w, "int64"))
        ),
    )
    flat = relax.op.add(
        relax.op.multiply(
            relax.op.add(
                relax.op.multiply(
                    relax.op.add(
                        relax.op.multiply(grid(np.arange(batch), 0), relax.const(out_h, "int64")),
                        out_y,
                    ),
                    relax.const(out_w, "int64"),
                ),
                out_x,
            ),
            relax.const(channels, "int64"),
        ),
        grid(np.arange(channels), 3),
    )
    flat = relax.op.where(inside, flat, relax.const(total, "int64"))  # a slot cut off below
    scattered = relax.op.scatter_nd(
        relax.op.zeros((total + 1,), "float32"),
        relax.op.reshape(flat, (data_size, 1)),
        relax.op.reshape(data, (data_size,)),
    )
    kept = relax.op.strided_slice(scattered, axes=[0], begin=[0], end=[total])
    return relax.op.reshape(kept, (batch, out_h, out_w, channels))
