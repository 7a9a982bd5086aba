"""Small readers of Relax IR that the graph rewrites share (layout, Winograd, ONNX)."""

from __future__ import annotations


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
