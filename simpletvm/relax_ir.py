"""Small readers and rewrites of Relax IR that the importers and the compiler share:
shapes, calls of an operator, and the cancelling of transpose pairs (ConvertLayout leaves
them, and so does the TFLite frontend around transposed convolutions)."""

from __future__ import annotations

from functools import cache

import numpy as np


def static_shape(expr) -> tuple[int, ...] | None:
    """The shape of a tensor-typed Relax expression when every dimension is a constant."""
    from tvm import relax

    ty = getattr(expr, "ty", None)
    if not isinstance(ty, relax.TensorType) or not isinstance(ty.shape, relax.ShapeExpr):
        return None
    try:
        return tuple(int(dim) for dim in ty.shape.values)
    except (TypeError, ValueError):
        return None


def cancel_permutations(mod):
    """Fold ``permute_dims`` chains and ``permute_dims`` of constants.

    ``permute_dims(permute_dims(x, a), b)`` becomes ``x`` when the composition is the
    identity and one ``permute_dims(x, c)`` otherwise; ``permute_dims(const)`` (also of a
    reshaped constant, like the ONNX frontend's Conv bias) becomes the permuted constant,
    computed here in numpy: exact, and unlike ``FoldConstant`` it compiles no kernel
    (``FoldConstant`` takes seconds on MobileNetV2's 35 biases). ``reshape(permute_dims(x))``
    reads ``x`` directly when the permutation only moves axes of extent 1 (a classifier's
    1x1 map flattened after NHWC<->NCHW). What is left unused is removed.
    """
    from tvm import relax

    rewriter = _make_canceller()(mod)
    for gvar, func in list(mod.functions_items()):
        if isinstance(func, relax.Function):
            rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
    if not rewriter.changed:
        return mod
    return relax.transform.DeadCodeElimination()(rewriter.builder_.get())


def count_calls(mod, op_name: str) -> int:
    """How many calls of the Relax operator ``op_name`` the Relax functions of ``mod`` have."""
    return len(calls_of(mod, op_name))


def calls_of(mod, op_name: str) -> list:
    """The calls of the Relax operator ``op_name`` in the Relax functions of ``mod``."""
    import tvm
    from tvm import relax

    found = []

    def visit(expr):
        if (
            isinstance(expr, relax.Call)
            and isinstance(expr.op, tvm.ir.Op)
            and expr.op.name == op_name
        ):
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
            if not (
                isinstance(inner, relax.Call)
                and isinstance(inner.op, tvm.ir.Op)
                and inner.op.name == "relax.permute_dims"
            ):
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
            if not (
                isinstance(inner, relax.Call)
                and isinstance(inner.op, tvm.ir.Op)
                and inner.op.name == "relax.permute_dims"
            ):
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
            if not (isinstance(expr, relax.Call) and isinstance(expr.op, tvm.ir.Op) and depth < 8):
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
