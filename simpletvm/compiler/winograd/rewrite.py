"""The Relax rewrite: every eligible conv2d becomes a call of the Winograd operator in its
form, its weight transformed once; and the survey of which layers are contested."""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache

import numpy as np

from simpletvm.compiler.winograd.compute import winograd_conv2d_nhwc
from simpletvm.compiler.winograd.policy import KERNEL_SIZE, ConvSignature, forms_for, tile_size_for
from simpletvm.compiler.winograd.transform import transform_weight
from simpletvm.relax_ir import static_shape

OUT_EWISE_FUSABLE = 4  # relax OpPatternKind.kOutEWiseFusable


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


def apply_winograd(
    mod,
    tile_size: int | None = None,
    min_channels: int = 16,
    forms: Mapping[ConvSignature, int | None] | None = None,
):
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
    return {signature: forms for signature, forms in rewriter.surveyed.items() if len(forms) > 1}


def conv_signature(call) -> ConvSignature:
    """The signature of an eligible conv2d call."""
    out_channels = dict(zip(call.attrs.kernel_layout, call.args[1].value.shape))["O"]
    return ConvSignature(
        tuple(static_shape(call.args[0])),
        int(out_channels),
        tuple(int(p) for p in call.attrs.padding),
    )


def _output_size(call) -> tuple[int, int]:
    """(H, W) out of a stride-1 3x3 NHWC conv2d."""
    _, h, w, _ = static_shape(call.args[0])
    top, left, bottom, right = (int(p) for p in call.attrs.padding)
    return h + top + bottom - KERNEL_SIZE + 1, w + left + right - KERNEL_SIZE + 1


def _weight_hwio(call) -> np.ndarray:
    layout = call.attrs.kernel_layout
    weight = call.args[1].value.numpy()
    return np.transpose(weight, [layout.index(axis) for axis in "HWIO"])


@cache
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
                winograd_conv2d_nhwc,
                call.args[0],
                relax.const(kernel_pack),
                padding=tuple(call.attrs.padding),
                tile_size=tile_size,
                primfunc_name_hint=f"conv2d_winograd_f{tile_size}_nhwc",
                # fusable with the elementwise ops that follow: AnnotateTIROpPattern
                # (TVM 0.27) finds this pattern itself too, and it keeps a preset (nonzero)
                # one, so the epilogue fusion does not hang on what its analysis concludes
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
            if (
                not isinstance(weight, relax.Call)
                or not isinstance(weight.op, tvm.ir.Op)
                or weight.op.name != "relax.permute_dims"
                or not isinstance(weight.args[0], tvm.ir.expr.GenericConst)
            ):
                return call
            value = weight.args[0].value.numpy()
            axes = weight.attrs.axes
            value = np.transpose(value, None if axes is None else [int(a) for a in axes])
            return relax.Call(call.op, [call.args[0], relax.const(value)], call.attrs)

    return WinogradRewriter
