"""NCHW -> NHWC for CPU targets: convert the convolutions, then cancel the transposes.

Tuned NHWC convolutions ran 1.1-2.5x faster than NCHW ones on the CPUs measured (the
vector axis becomes the channels instead of a 7- or 14-wide row). ONNX models (and
TensorFlow graphs, which reach TVM through tf2onnx) are NCHW behind a transpose at the
input. :func:`to_nhwc` runs Relax's ``ConvertLayout``, which wraps every converted op in
``permute_dims`` back and forth, then cancels the pairs that meet (two permutations that
compose to the identity) and folds the permutations of constants (weights, biases), so
what is left is a transpose at each boundary of the NHWC region.

Ops ``ConvertLayout`` has no rule for (``call_tir``, ``clip``, ``nn.pad``, ``where``,
``broadcast_to``, a ``reshape`` that really moves data, ...) stay NCHW with a transpose
pair around them; :func:`simpletvm.models.onnx.relax_from_onnx` rewrites the ONNX model
(:mod:`simpletvm.models.onnx_rewrite`) so Clip and Pad do not import as such ops.
Measured on tf2onnx's MobileNetV2 and MobileNet v1 (32x32): every convolution NHWC and
no transpose left, against 73 and 54 left from TVM's import as is.
"""

from __future__ import annotations

import warnings
from functools import cache

import numpy as np

from .relax_ir import static_shape

# Only the convolutions are named: pools, reductions, elementwise ops, concat, squeeze
# and the rest with a layout rule follow their input's layout (TVM 0.27's pool rules fail
# a check when a desired layout is given for them).
NHWC_LAYOUTS = {"relax.nn.conv2d": ["NHWC", "OHWI"]}


def to_nhwc(mod):
    """``mod`` with its NCHW 2-D convolutions (and what follows them) in NHWC, and stats.

    Returns ``(module, stats)``; stats has ``conv2d_nchw`` (before), ``conv2d_converted``,
    ``conv2d_nchw_left`` and ``permute_dims_before``/``permute_dims_after`` (calls in
    the module). A module with no NCHW convolution (a TFLite import) is returned as is,
    the same object, and so is one whose conversion fails (stats then say ``failed``,
    and a warning is given).
    """
    import tvm
    from tvm import relax

    before = conv2d_layouts(mod)
    stats = {
        "conv2d_nchw": before.get("NCHW", 0),
        "conv2d_converted": 0,
        "conv2d_nchw_left": before.get("NCHW", 0),
        "permute_dims_before": count_calls(mod, "relax.permute_dims"),
    }
    stats["permute_dims_after"] = stats["permute_dims_before"]
    if not stats["conv2d_nchw"]:
        return mod, stats
    try:
        converted = tvm.transform.Sequential([
            relax.transform.ConvertLayout(NHWC_LAYOUTS),
            relax.transform.CanonicalizeBindings(),
        ])(mod)
    except Exception as error:  # noqa: BLE001 - a layout rule that fails: keep the import's
        # (TVM 0.27's rule for relax.stack fails on a 5-D stack of converted tensors)
        stats["failed"] = (str(error).strip().splitlines() or [repr(error)])[-1]
        warnings.warn(f"NHWC conversion failed, keeping NCHW: {stats['failed']}", stacklevel=2)
        return mod, stats
    # FoldConstant puts the constants the cancellation made into their uses (a weight
    # bound to a variable is no weight to the Winograd rewrite), and folds what else is
    # constant; with the permutations already folded it has no kernel left to compile
    converted = relax.transform.FoldConstant()(cancel_permutations(converted))
    after = conv2d_layouts(converted)
    stats["conv2d_nchw_left"] = after.get("NCHW", 0)
    stats["conv2d_converted"] = stats["conv2d_nchw"] - stats["conv2d_nchw_left"]
    stats["permute_dims_after"] = count_calls(converted, "relax.permute_dims")
    return converted, stats


def cancel_permutations(mod):
    """Fold ``permute_dims`` chains and ``permute_dims`` of constants.

    ``permute_dims(permute_dims(x, a), b)`` becomes ``x`` when the composition is the
    identity and one ``permute_dims(x, c)`` otherwise; ``permute_dims(const)`` (also of a
    reshaped constant, like the ONNX frontend's Conv bias) becomes the permuted constant,
    computed here in numpy: exact, and unlike ``FoldConstant`` it compiles no kernel (2 s
    for MobileNetV2's 35 biases). ``reshape(permute_dims(x))`` reads ``x`` directly when
    the permutation only moves axes of extent 1 (a classifier's 1x1 map flattened after
    NHWC<->NCHW). What is left unused is removed.
    """
    from tvm import relax

    rewriter = _make_canceller()(mod)
    for gvar, func in list(mod.functions_items()):
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
    if not rewriter.changed:
        return mod
    return relax.transform.DeadCodeElimination()(rewriter.builder_.get())


def conv2d_layouts(mod) -> dict[str, int]:
    """How many ``relax.nn.conv2d`` calls the Relax functions of ``mod`` have, by data
    layout."""
    counts: dict[str, int] = {}
    for call in _calls(mod, "relax.nn.conv2d"):
        layout = str(call.attrs.data_layout)
        counts[layout] = counts.get(layout, 0) + 1
    return counts


def count_calls(mod, op_name: str) -> int:
    """How many calls of the Relax operator ``op_name`` the Relax functions of ``mod`` have."""
    return len(_calls(mod, op_name))


# ---- internals ------------------------------------------------------------------------
def _calls(mod, op_name: str) -> list:
    import tvm
    from tvm import relax

    found = []

    def visit(expr):
        if (isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op)
                and expr.op.name == op_name):
            found.append(expr)

    for _, func in mod.functions_items():
        if isinstance(func, relax.Function):
            relax.analysis.post_order_visit(func, visit)
    return found


def _axes(call, ndim: int) -> list[int]:
    axes = call.attrs.axes
    return list(range(ndim))[::-1] if axes is None else [int(a) for a in axes]


@cache
def _make_canceller():
    """The mutator class, defined on first use so importing this module needs no TVM."""
    import tvm
    from tvm import relax

    @relax.expr_functor.mutator
    class PermutationCanceller(relax.PyExprMutator):
        def __init__(self, mod):
            super().__init__(mod)
            self.changed = False

        def visit_call_(self, call):
            call = self.visit_expr_post_order(call)
            if isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.reshape":
                return self._reshape_of_permutation(call)
            if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.permute_dims"):
                return call
            data = call.args[0]
            ndim = getattr(data.ty, "ndim", -1)
            if ndim is None or ndim < 0:
                return call
            axes = _axes(call, ndim)
            value = self._constant_array(data)
            if value is not None:
                self.changed = True
                return relax.const(np.ascontiguousarray(np.transpose(value, axes)))
            inner = self.lookup_binding(data) if isinstance(data, relax.Var) else data
            if not (isinstance(inner, relax.Call) and isinstance(inner.op, tvm.ir.Op)
                    and inner.op.name == "relax.permute_dims"):
                return call
            inner_axes = _axes(inner, ndim)
            composed = [inner_axes[a] for a in axes]
            self.changed = True
            if composed == list(range(ndim)):
                return inner.args[0]
            return relax.op.permute_dims(inner.args[0], composed)

        def _reshape_of_permutation(self, call):
            """``reshape(permute_dims(x))`` as ``reshape(x)`` when the permutation only
            moves axes of extent 1: it leaves the element order, all a reshape reads."""
            data = call.args[0]
            inner = self.lookup_binding(data) if isinstance(data, relax.Var) else data
            if not (isinstance(inner, relax.Call) and isinstance(inner.op, tvm.ir.Op)
                    and inner.op.name == "relax.permute_dims"):
                return call
            shape = static_shape(inner.args[0])
            if shape is None:
                return call
            moved = [axis for axis in _axes(inner, len(shape)) if shape[axis] != 1]
            if moved != sorted(moved):
                return call
            self.changed = True
            return relax.Call(call.op, [inner.args[0], *call.args[1:]], call.attrs)

        def _constant_array(self, expr, depth: int = 0):
            """The value of a constant, or of reshapes and permutations of one (the ONNX
            frontend reshapes a Conv's bias to (1, C, 1, 1)), else None."""
            if isinstance(expr, relax.Var) and depth < 8:
                expr = self.lookup_binding(expr)
            if isinstance(expr, tvm.ir.expr.GenericConst):
                return expr.value.numpy()
            if not (isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op)
                    and depth < 8):
                return None
            if expr.op.name == "relax.reshape":
                value = self._constant_array(expr.args[0], depth + 1)
                shape = static_shape(expr)
                return None if value is None or shape is None else value.reshape(shape)
            if expr.op.name == "relax.permute_dims":
                value = self._constant_array(expr.args[0], depth + 1)
                return None if value is None else np.transpose(value, _axes(expr, value.ndim))
            return None

    return PermutationCanceller
