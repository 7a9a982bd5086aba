"""The Winograd matrices and the weight transform U = G g G^T, computed once in numpy
while the module is rewritten (the operator reads U as a constant)."""

from __future__ import annotations

from functools import cache

import numpy as np

from simpletvm.compiler.winograd.policy import KERNEL_SIZE


def transform_weight(weight_hwio: np.ndarray, tile_size: int = 4) -> np.ndarray:
    """U = G g G^T per (output, input) channel pair, in float64, as float32
    (alpha, alpha, CO, CI): the layout the bgemm reads."""
    _, _, g = matrices_f64(tile_size)
    u = np.einsum("ak,klio,bl->aboi", g, weight_hwio.astype(np.float64), g)
    return np.ascontiguousarray(u.astype(np.float32))


@cache
def matrices_f64(tile_size: int):
    """TVM's A, B, G (the ones ``winograd_transform_matrices`` wraps) in float64."""
    from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

    points = _interpolation_points(tile_size + KERNEL_SIZE - 2)
    return _cook_toom_convolution(points, tile_size, KERNEL_SIZE)
