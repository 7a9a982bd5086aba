"""NCHW -> NHWC for CPU targets: convert the convolutions, then cancel the transposes.

Tuned NHWC convolutions ran 1.1-2.5x faster than NCHW ones on the CPUs measured (the
vector axis becomes the channels instead of a 7- or 14-wide row). ONNX models (and
TensorFlow graphs, which reach TVM through tf2onnx) are NCHW behind a transpose at the
input. :func:`to_nhwc` runs Relax's ``ConvertLayout``, which wraps every converted op in
``permute_dims`` back and forth, then cancels the pairs that meet (two permutations that
compose to the identity) and folds the permutations of constants (weights, biases), so
what is left is a transpose at each boundary of the NHWC region.

Run :func:`simpletvm.models.onnx_rewrite.rewrite_for_import` on ONNX models first: Relax
ops ``ConvertLayout`` has no rule for (``call_tir``, ``clip``, ``pad``, ``reshape``, ...)
pin NCHW around them.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

NHWC_LAYOUTS = {
    "relax.nn.conv2d": ["NHWC", "OHWI"],
    # pooling follows its input's layout by itself; listed so a pool that comes before
    # any convolution (right after the input transpose) is converted too
    "relax.nn.max_pool2d": ["NHWC"],
    "relax.nn.avg_pool2d": ["NHWC"],
    "relax.nn.adaptive_avg_pool2d": ["NHWC"],
}


def to_nhwc(mod):
    """``mod`` with its NCHW 2-D convolutions (and pools) in NHWC, and stats.

    Returns ``(module, stats)``; stats has ``conv2d_nchw`` (before), ``conv2d_converted``,
    ``conv2d_nchw_left`` and ``permute_dims_before``/``permute_dims_after`` (calls in
    the module). A module with no NCHW convolution (a TFLite import) is returned as is,
    the same object.
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
    converted = tvm.transform.Sequential([
        relax.transform.ConvertLayout(NHWC_LAYOUTS),
        relax.transform.CanonicalizeBindings(),
    ])(mod)
    converted = cancel_permutations(converted)
    after = conv2d_layouts(converted)
    stats["conv2d_nchw_left"] = after.get("NCHW", 0)
    stats["conv2d_converted"] = stats["conv2d_nchw"] - stats["conv2d_nchw_left"]
    stats["permute_dims_after"] = count_calls(converted, "relax.permute_dims")
    return converted, stats


def cancel_permutations(mod):
    """Fold ``permute_dims`` chains and ``permute_dims`` of constants.

    ``permute_dims(permute_dims(x, a), b)`` becomes ``x`` when the composition is the
    identity and one ``permute_dims(x, c)`` otherwise; ``permute_dims(const)`` becomes the
    permuted constant (computed here, in numpy: exact, and no kernel is compiled). The
    permutations left unused are removed.
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


@lru_cache(maxsize=None)
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
            if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.permute_dims"):
                return call
            data = call.args[0]
            ndim = getattr(data.ty, "ndim", -1)
            if ndim is None or ndim < 0:
                return call
            axes = _axes(call, ndim)
            if isinstance(data, tvm.ir.expr.GenericConst):
                self.changed = True
                return relax.const(np.ascontiguousarray(np.transpose(data.value.numpy(), axes)))
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

    return PermutationCanceller
