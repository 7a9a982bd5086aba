"""The Winograd operator in TE: NHWC data, a pre-transformed kernel, each transform as two
1-D passes with the matrices' nonzero entries as constants. Its transform blocks name
SimpleTVM's schedule rules (:mod:`~simpletvm.compiler.winograd.schedule_rules`)."""

from __future__ import annotations

import numpy as np

from simpletvm.compiler.winograd.policy import KERNEL_SIZE
from simpletvm.compiler.winograd.transform import matrices_f64

# MetaSchedule's rules for the transform blocks, registered for CPU targets by
# :func:`register_schedule_rules` (TVM's own rules unroll the channel loop's body instead of
# vectorizing it, and expect 2-D sums where this operator computes two 1-D passes)
DATA_PACK_RULE = "simpletvm_winograd_data_pack"
INVERSE_RULE = "simpletvm_winograd_inverse"
# the batched product's block: the cores split its tiles (:mod:`simpletvm.compiler.core_split`)
PRODUCT_BLOCK = "bgemm"


def winograd_conv2d_nhwc(data, kernel_pack, padding, tile_size: int = 4):
    """TE Winograd conv2d: NHWC data, pre-transformed kernel (alpha, alpha, CO, CI).

    ``padding`` is (top, left, bottom, right). H and W need not be multiples of the
    tile: the padded input is extended to whole tiles and the output cropped.
    """
    from tvm import te
    from tvm.topi.nn.pad import pad

    n, h, w, ci = (int(s) for s in data.shape)
    alpha, alpha2, co, ci2 = (int(s) for s in kernel_pack.shape)
    m, r = tile_size, KERNEL_SIZE
    assert alpha == alpha2 == m + r - 1 and ci2 == ci, (data.shape, kernel_pack.shape)
    pad_t, pad_l, pad_b, pad_r = padding

    out_h = h + pad_t + pad_b - r + 1
    out_w = w + pad_l + pad_r - r + 1
    n_h, n_w = (out_h + m - 1) // m, (out_w + m - 1) // m
    tiles = n * n_h * n_w
    # whole tiles: the last tile may read past the padded input, those rows are zeros
    extra_h = (n_h - 1) * m + alpha - (h + pad_t + pad_b)
    extra_w = (n_w - 1) * m + alpha - (w + pad_l + pad_r)
    data_pad = pad(
        data,
        (0, pad_t, pad_l, 0),
        (0, pad_b + extra_h, pad_r + extra_w, 0),
        name="data_pad",
        attrs={"schedule_rule": "None"},
    )
    input_tile = te.compute(
        (alpha, alpha, tiles, ci),
        lambda eps, nu, p, c: data_pad[
            p // (n_h * n_w), ((p // n_w) % n_h) * m + eps, (p % n_w) * m + nu, c
        ],
        name="input_tile",
        attrs={"schedule_rule": "None"},
    )
    # B^T d B and A^T M A as two 1-D passes each, written with the matrices' nonzero
    # entries as constants (:func:`_combine`): fewer multiply-adds than the 2-D sums, and
    # no Select chain over 36 matrix entries left in every unrolled statement
    a_f64, b_f64, _ = matrices_f64(m)
    a_mat, b_mat = a_f64.astype(np.float32), b_f64.astype(np.float32)
    data_pack_rows = te.compute(
        (alpha, alpha, tiles, ci),
        lambda eps, nu, p, c: _combine(b_mat, eps, lambda k: input_tile[k, nu, p, c]),
        name="data_pack_rows",
        attrs={"schedule_rule": "None"},
    )
    data_pack = te.compute(
        (alpha, alpha, tiles, ci),
        lambda eps, nu, p, c: _combine(b_mat, nu, lambda k: data_pack_rows[eps, k, p, c]),
        name="data_pack",
        attrs={"schedule_rule": DATA_PACK_RULE},
    )
    r_c = te.reduce_axis((0, ci), name="ci")
    bgemm = te.compute(
        (alpha, alpha, tiles, co),
        lambda eps, nu, p, o: te.sum(
            data_pack[eps, nu, p, r_c] * kernel_pack[eps, nu, o, r_c], axis=[r_c]
        ),
        name=PRODUCT_BLOCK,
        attrs={"layout_free_placeholders": [kernel_pack], "meta_schedule.write_cache_level": [2]},
    )
    # a reduction, unlike the other passes: MetaSchedule's tiling of bgemm fuses a
    # spatial consumer into its tiles, and fails on one that reads a constant index
    r_k = te.reduce_axis((0, alpha), "r_k")
    inverse_rows = te.compute(
        (m, alpha, tiles, co),
        lambda vh, nu, p, o: te.sum(bgemm[r_k, nu, p, o] * _entry(a_mat, r_k, vh), axis=[r_k]),
        name="inverse_rows",
        attrs={"schedule_rule": "None"},
    )
    inverse = te.compute(
        (m, m, tiles, co),
        lambda vh, vw, p, o: _combine(a_mat, vw, lambda k: inverse_rows[vh, k, p, o]),
        name="inverse",
        attrs={"schedule_rule": INVERSE_RULE},
    )
    return te.compute(
        (n, out_h, out_w, co),
        lambda b, y, x, o: inverse[y % m, x % m, b * n_h * n_w + (y // m) * n_w + x // m, o],
        name="conv2d_winograd",
    )


def _entry(matrix: np.ndarray, row, column):
    """matrix[row, column] for symbolic indices: a Select chain over its nonzero entries,
    one constant once both indices are unrolled."""
    from tvm import tirx

    expr = tirx.const(0.0, "float32")
    for (i, j), value in np.ndenumerate(matrix):
        if value != 0:
            expr = tirx.Select(
                tirx.And(row == i, column == j), tirx.const(float(value), "float32"), expr
            )
    return expr


def _combine(matrix: np.ndarray, index, term):
    """sum_k matrix[k, index] * term(k) for a symbolic ``index``: a Select over the
    values of ``index``, each branch the sum of its column's nonzero entries times
    ``term`` (1 and -1 add or subtract the term). Once the rule unrolls ``index``, the
    simplifier keeps one branch of a chain as long as the matrix is wide (at most 6)."""
    from tvm import tirx

    def column(i):
        total = None
        for k, coefficient in enumerate(matrix[:, i]):
            if coefficient == 0:
                continue
            value = term(k)
            if coefficient == -1:
                total = -value if total is None else total - value
                continue
            if coefficient != 1:
                value = value * tirx.const(float(coefficient), "float32")
            total = value if total is None else total + value
        return total if total is not None else tirx.const(0.0, "float32")

    expr = column(matrix.shape[1] - 1)
    for i in reversed(range(matrix.shape[1] - 1)):
        expr = tirx.Select(index == i, column(i), expr)
    return expr
