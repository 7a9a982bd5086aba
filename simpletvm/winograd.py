"""Winograd F(m, 3) for NHWC 3x3 stride-1 convolutions, weights transformed at import.

TVM 0.27's own precomputed-weight Winograd raises "LEGACY-FLOW", and its other Winograd
transforms the weights inside the kernel on every inference. Here the weight transform
U = G g G^T runs once, in numpy, while the module is rewritten, and the operator reads U
as a constant. Measured on a 2-core Zen3 host: a tuned 3x3 128->128 28x28 layer ran in
1.05 ms against 2.0-2.9 ms for the tuned direct NHWC convolution.

The operator keeps the block names of ``topi.nn.conv2d._conv2d_winograd_nhwc_impl``
(data_pad, input_tile, data_pack, bgemm, inverse) but computes each transform as two 1-D
passes (B^T d, then (B^T d) B) whose coefficients are the matrices' nonzero entries as
constants: TOPI's 2-D sums cost more multiply-adds and reach each entry through a
36-way Select that every unrolled statement carried into the build (1.5-2.7 s of TIR
passes per candidate against 0.1 s for a direct convolution). Its transform
blocks name SimpleTVM's own schedule rules (:func:`register_schedule_rules`): per tile
and channel chunk (both sampled), the points unrolled and the channels vectorized, where
TVM's rules unroll the body of a scalar channel loop. The operator is marked
out-elementwise-fusable so FuseOps folds bias, activation and residual add into it, as it
does for a direct convolution.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from .relax_ir import static_shape

KERNEL_SIZE = 3
OUT_EWISE_FUSABLE = 4  # relax OpPatternKind.kOutEWiseFusable
# The Winograd forms by tile size m, largest first (F(4,3) saves most multiplications,
# F(2,3) keeps weights smaller), each with the output tiles it needs to be used at all.
# A transformed weight is read once per tile and U is (m+2)^2/9 times the direct weights:
# with few tiles a layer streams weights instead of computing. ResNet-18's 512-channel
# 7x7 layers ran 1.5x their tuned estimate in the model as F(4,3) (4 tiles); as F(2,3)
# (16 tiles) they lost to the direct convolution in every search that tuned both, on two
# hosts (1.64-1.76 ms against 2.17-2.30 for the three calls in three runs on a 2-core EPYC,
# 3.18 against 3.71 on a 2-core Xeon, where that contest took 120 of a 30-minute search's
# 905 trials, each a Winograd build of 1-2 s with the operator of then); the 14x14 ones
# (16 tiles of F(4,3)) ran within 10% of their estimate.
MIN_TILES = {4: 16, 2: 32}
TILE_SIZES = tuple(MIN_TILES)
# Below CONTESTED_FACTOR times its form's MIN_TILES a layer may stream its weights, and
# whether the next smaller form (fewer weight bytes, more multiplications) is faster in
# the model is measured, not guessed: both forms are tuned (:mod:`simpletvm.conv_forms`).
CONTESTED_FACTOR = 2


# MetaSchedule's rules for the transform blocks, registered for CPU targets by
# :func:`register_schedule_rules` (TVM's own rules unroll the channel loop's body instead of
# vectorizing it, and expect the 2-D sums this operator no longer computes)
DATA_PACK_RULE = "simpletvm_winograd_data_pack"
INVERSE_RULE = "simpletvm_winograd_inverse"


class ConvSignature(NamedTuple):
    """What makes two convolutions the same layer to the rewrite: the NHWC input shape,
    the output channels and the padding (top, left, bottom, right)."""

    data_shape: tuple[int, ...]
    out_channels: int
    padding: tuple[int, ...]

    def __str__(self) -> str:
        _, h, w, c = self.data_shape
        return f"3x3 {c}->{self.out_channels} at {h}x{w}"


def tile_count(out_h: int, out_w: int, tile_size: int) -> int:
    return -(-out_h // tile_size) * -(-out_w // tile_size)


def tile_size_for(out_h: int, out_w: int) -> int | None:
    """The Winograd tile a layer of this output size gets: the largest of TILE_SIZES
    that still gives its MIN_TILES tiles to reuse each weight over, or None (direct)."""
    for m in TILE_SIZES:
        if tile_count(out_h, out_w, m) >= MIN_TILES[m]:
            return m
    return None


def forms_for(out_h: int, out_w: int) -> tuple[int | None, ...]:
    """The forms (tile sizes, None: direct) a layer of this output size is tuned in:
    :func:`tile_size_for`'s first, then, when that gives fewer than CONTESTED_FACTOR
    times its MIN_TILES tiles, the next smaller form."""
    first = tile_size_for(out_h, out_w)
    if first is None or (tile_count(out_h, out_w, first)
                         >= CONTESTED_FACTOR * MIN_TILES[first]):
        return (first,)
    smaller = [m for m in TILE_SIZES if m < first]
    return (first, smaller[0] if smaller else None)


def winograd_eligible(call, min_channels: int = 16) -> bool:
    """Whether ``call`` is a conv2d this rewrite applies to.

    float32, NHWC data, 3x3 kernel stored as a constant in any order of O, I, H, W (the
    TFLite frontend gives HWIO, ConvertLayout to NHWC gives OHWI), stride 1, dilation 1,
    no groups, and at least ``min_channels`` input and output channels: with few channels
    the transforms cost more than the multiplications they save.
    """
    import tvm
    from tvm import relax

    if not isinstance(call, relax.Call) or not isinstance(call.op, tvm.ir.Op):
        return False
    if call.op.name != "relax.nn.conv2d" or len(call.args) != 2:
        return False
    attrs = call.attrs
    data, weight = call.args
    if not isinstance(weight, tvm.ir.expr.GenericConst):
        return False  # a weight computed at run time cannot be transformed here
    if attrs.data_layout != "NHWC" or attrs.out_layout != "NHWC":
        return False
    if sorted(attrs.kernel_layout) != sorted("OIHW"):
        return False
    if tuple(attrs.strides) != (1, 1) or tuple(attrs.dilation) != (1, 1) or attrs.groups != 1:
        return False
    if attrs.out_dtype not in (None, "float32"):
        return False
    data_shape = static_shape(data)
    if data_shape is None or len(data_shape) != 4 or str(data.ty.dtype) != "float32":
        return False  # static shapes only: the tile count is fixed at build time
    value = weight.value
    if str(value.dtype) != "float32" or len(value.shape) != 4:
        return False
    dims = dict(zip(attrs.kernel_layout, value.shape))
    if (dims["H"], dims["W"]) != (KERNEL_SIZE, KERNEL_SIZE):
        return False
    return min(dims["I"], dims["O"]) >= min_channels


def apply_winograd(mod, tile_size: int | None = None, min_channels: int = 16,
                   forms: Mapping[ConvSignature, int | None] | None = None):
    """Rewrite every eligible conv2d of ``mod`` to a Winograd F(m, 3) call_tir, m chosen
    per layer by ``forms`` (by signature; None keeps the layer direct), else by
    :func:`tile_size_for` (a layer with too few tiles stays direct), or ``tile_size`` for
    all.

    Returns ``(module, number of rewritten convolutions)``; the input is left unchanged.
    The conv's padding goes into the operator, its weight is replaced by the transformed
    weight U of shape (alpha, alpha, CO, CI), alpha = m + 2.
    """
    from tvm import relax

    rewriter = _make_rewriter()(mod, tile_size, min_channels, dict(forms or {}))
    for gvar, func in list(mod.functions_items()):
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
    if rewriter.count == 0:
        return mod, 0
    # weight permutations folded into U (ConvertLayout's) are left unused: drop them
    return relax.transform.DeadCodeElimination()(rewriter.builder_.get()), rewriter.count


def contested_layers(mod, min_channels: int = 16) -> dict[ConvSignature, tuple[int | None, ...]]:
    """The eligible layers of ``mod`` with more than one form to tune (:func:`forms_for`),
    by signature, each with its forms (the default first)."""
    from tvm import relax

    rewriter = _make_rewriter()(mod, None, min_channels, {}, survey=True)
    for func in mod.functions.values():
        if isinstance(func, relax.Function):
            rewriter.visit_expr(func)
    return {signature: forms for signature, forms in rewriter.surveyed.items()
            if len(forms) > 1}


def transform_weight(weight_hwio: np.ndarray, tile_size: int = 4) -> np.ndarray:
    """U = G g G^T per (output, input) channel pair, in float64, as float32
    (alpha, alpha, CO, CI): the layout the bgemm reads."""
    _, _, g = _matrices_f64(tile_size)
    u = np.einsum("ak,klio,bl->aboi", g, weight_hwio.astype(np.float64), g)
    return np.ascontiguousarray(u.astype(np.float32))


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
    data_pad = pad(data, (0, pad_t, pad_l, 0), (0, pad_b + extra_h, pad_r + extra_w, 0),
                   name="data_pad", attrs={"schedule_rule": "None"})
    input_tile = te.compute(
        (alpha, alpha, tiles, ci),
        lambda eps, nu, p, c: data_pad[
            p // (n_h * n_w), ((p // n_w) % n_h) * m + eps, (p % n_w) * m + nu, c],
        name="input_tile", attrs={"schedule_rule": "None"},
    )
    # B^T d B and A^T M A as two 1-D passes each, written with the matrices' nonzero
    # entries as constants (:func:`_combine`): fewer multiply-adds than the 2-D sums, and
    # no Select chain over 36 matrix entries left in every unrolled statement
    a_f64, b_f64, _ = _matrices_f64(m)
    a_mat, b_mat = a_f64.astype(np.float32), b_f64.astype(np.float32)
    data_pack_rows = te.compute(
        (alpha, alpha, tiles, ci),
        lambda eps, nu, p, c: _combine(b_mat, eps, lambda k: input_tile[k, nu, p, c]),
        name="data_pack_rows", attrs={"schedule_rule": "None"},
    )
    data_pack = te.compute(
        (alpha, alpha, tiles, ci),
        lambda eps, nu, p, c: _combine(b_mat, nu, lambda k: data_pack_rows[eps, k, p, c]),
        name="data_pack", attrs={"schedule_rule": DATA_PACK_RULE},
    )
    r_c = te.reduce_axis((0, ci), name="ci")
    bgemm = te.compute(
        (alpha, alpha, tiles, co),
        lambda eps, nu, p, o: te.sum(data_pack[eps, nu, p, r_c] * kernel_pack[eps, nu, o, r_c],
                                     axis=[r_c]),
        name="bgemm",
        attrs={"layout_free_placeholders": [kernel_pack],
               "meta_schedule.write_cache_level": [2]},
    )
    # a reduction, unlike the other passes: MetaSchedule's tiling of bgemm fuses a
    # spatial consumer into its tiles, and fails on one that reads a constant index
    r_k = te.reduce_axis((0, alpha), "r_k")
    inverse_rows = te.compute(
        (m, alpha, tiles, co),
        lambda vh, nu, p, o: te.sum(bgemm[r_k, nu, p, o] * _entry(a_mat, r_k, vh), axis=[r_k]),
        name="inverse_rows", attrs={"schedule_rule": "None"},
    )
    inverse = te.compute(
        (m, m, tiles, co),
        lambda vh, vw, p, o: _combine(a_mat, vw, lambda k: inverse_rows[vh, k, p, o]),
        name="inverse", attrs={"schedule_rule": INVERSE_RULE},
    )
    return te.compute(
        (n, out_h, out_w, co),
        lambda b, y, x, o: inverse[y % m, x % m, b * n_h * n_w + (y // m) * n_w + x // m, o],
        name="conv2d_winograd",
    )


def register_schedule_rules() -> None:
    """Make the transform blocks' schedule rules known to MetaSchedule in this process
    (it looks a block's ``schedule_rule`` up as ``s_tir.meta_schedule.cpu.<name>``).
    Every process that generates design spaces calls this; safe to call again."""
    import tvm_ffi

    for name, rule in ((DATA_PACK_RULE, _schedule_data_pack), (INVERSE_RULE, _schedule_inverse)):
        tvm_ffi.register_global_func(f"s_tir.meta_schedule.cpu.{name}", rule, override=True)


def _schedule_data_pack(sch, data_pack):
    """The input transform: per tile and channel chunk, the padded tile, then both 1-D
    passes, unrolled over the tile's points and vectorized over the channels."""
    (rows,) = sch.get_producers(data_pack)
    (input_tile,) = sch.get_producers(rows)
    (data_pad,) = sch.get_producers(input_tile)
    tile_inner = _schedule_transform(sch, data_pack, rows)
    sch.compute_inline(input_tile)
    # the tile's padded input, per chunk: a location inside the vectorized transform
    # (which a sampled location may be) computes wrong values
    sch.compute_at(data_pad, tile_inner, preserve_unit_loops=True)
    sch.vectorize(sch.get_loops(data_pad)[-1])
    return [sch]


def _schedule_inverse(sch, inverse):
    """The output transform, scheduled as the input transform is."""
    (rows,) = sch.get_producers(inverse)
    _schedule_transform(sch, inverse, rows)
    return [sch]


def _schedule_transform(sch, block, rows):
    """Tile ``block``'s (point, point, tile, channel) loops as tile and channel chunks
    (sampled), with its first pass ``rows`` computed per chunk; the points unrolled, the
    channels innermost and vectorized. Returns the loop over the tiles of a chunk."""
    first, second, tile, channel = sch.get_loops(block)
    tile_outer, tile_inner = sch.split(tile, sch.sample_perfect_tile(tile, n=2,
                                                                     max_innermost_factor=64))
    channel_outer, channel_inner = sch.split(
        channel, sch.sample_perfect_tile(channel, n=2, max_innermost_factor=64))
    sch.reorder(tile_outer, channel_outer, tile_inner, first, second, channel_inner)
    sch.compute_at(rows, tile_inner, preserve_unit_loops=True)
    for loop in (first, second):
        sch.unroll(loop)
    sch.vectorize(channel_inner)
    # the first pass's own loops, below the three of the chunk: (point, point, tile,
    # channel) and, for the output transform's, its reduction over the points last
    row_first, row_second, row_tile, row_channel, *reduction = sch.get_loops(rows)[3:]
    if reduction:
        sch.reorder(row_tile, *reduction, row_channel)
    for loop in (row_first, row_second, *reduction):
        sch.unroll(loop)
    sch.vectorize(row_channel)
    return tile_inner


# ---- internals ------------------------------------------------------------------------
def _entry(matrix: np.ndarray, row, column):
    """matrix[row, column] for symbolic indices: a Select chain over its nonzero entries,
    one constant once both indices are unrolled."""
    from tvm import tirx

    expr = tirx.const(0.0, "float32")
    for (i, j), value in np.ndenumerate(matrix):
        if value != 0:
            expr = tirx.Select(tirx.And(row == i, column == j),
                               tirx.const(float(value), "float32"), expr)
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


@lru_cache(maxsize=None)
def _matrices_f64(tile_size: int):
    """TVM's A, B, G (the ones ``winograd_transform_matrices`` wraps) in float64."""
    from tvm.topi.nn.winograd_util import _cook_toom_convolution, _interpolation_points

    points = _interpolation_points(tile_size + KERNEL_SIZE - 2)
    return _cook_toom_convolution(points, tile_size, KERNEL_SIZE)


def conv_signature(call) -> ConvSignature:
    """The signature of an eligible conv2d call."""
    out_channels = dict(zip(call.attrs.kernel_layout, call.args[1].value.shape))["O"]
    return ConvSignature(tuple(static_shape(call.args[0])), int(out_channels),
                         tuple(int(p) for p in call.attrs.padding))


def _output_size(call) -> tuple[int, int]:
    """(H, W) out of a stride-1 3x3 NHWC conv2d."""
    _, h, w, _ = static_shape(call.args[0])
    top, left, bottom, right = (int(p) for p in call.attrs.padding)
    return h + top + bottom - KERNEL_SIZE + 1, w + left + right - KERNEL_SIZE + 1


def _weight_hwio(call) -> np.ndarray:
    layout = call.attrs.kernel_layout
    weight = call.args[1].value.numpy()
    return np.transpose(weight, [layout.index(axis) for axis in "HWIO"])


@lru_cache(maxsize=None)
def _make_rewriter():
    """The mutator class, defined on first use so importing this module needs no TVM."""
    import tvm
    from tvm import relax

    @relax.expr_functor.mutator
    class WinogradRewriter(relax.PyExprMutator):
        def __init__(self, mod, tile_size, min_channels, forms, survey=False):
            super().__init__(mod)
            self.tile_size = tile_size
            self.min_channels = min_channels
            self.forms = forms
            self.survey = survey  # only note each layer's forms in ``surveyed``
            self.surveyed: dict[ConvSignature, tuple[int | None, ...]] = {}
            self.count = 0

        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            folded = self._fold_weight_permutation(call)
            if not winograd_eligible(folded, self.min_channels):
                return call
            call = folded
            signature = conv_signature(call)
            if self.survey:
                self.surveyed[signature] = forms_for(*_output_size(call))
                return call
            if signature in self.forms:
                tile_size = self.forms[signature]
            else:
                tile_size = self.tile_size or tile_size_for(*_output_size(call))
            if tile_size is None:
                return call
            kernel_pack = transform_weight(_weight_hwio(call), tile_size)
            self.count += 1
            # call_te: int64 shapes and indices, as LegalizeOps gives the neighbours
            # FuseTIR merges this function with
            return self.builder_.call_te(
                winograd_conv2d_nhwc, call.args[0], relax.const(kernel_pack),
                padding=tuple(call.attrs.padding), tile_size=tile_size,
                primfunc_name_hint=f"conv2d_winograd_f{tile_size}_nhwc",
                # fusable with the elementwise ops that follow: AnnotateTIROpPattern
                # finds this pattern itself today and keeps a preset (nonzero) one, so a
                # change in its analysis cannot cost the epilogue fusion
                primfunc_attrs={"op_pattern": OUT_EWISE_FUSABLE},
            )

        def _fold_weight_permutation(self, call):
            """conv2d(x, permute_dims(W)) as conv2d(x, W') with W' computed here: what
            ConvertLayout leaves in front of a constant weight."""
            if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.nn.conv2d"):
                return call
            weight = call.args[1]
            if isinstance(weight, relax.Var):
                weight = self.lookup_binding(weight)
            if (not isinstance(weight, relax.Call) or not isinstance(weight.op, tvm.ir.Op)
                    or weight.op.name != "relax.permute_dims"
                    or not isinstance(weight.args[0], tvm.ir.expr.GenericConst)):
                return call
            value = weight.args[0].value.numpy()
            axes = weight.attrs.axes
            value = np.transpose(value, None if axes is None else [int(a) for a in axes])
            return relax.Call(call.op, [call.args[0], relax.const(value)], call.attrs)

    return WinogradRewriter
