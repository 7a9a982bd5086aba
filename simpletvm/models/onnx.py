"""ONNX models (files or ModelProto) into Relax; every TensorFlow source ends here too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from simpletvm.errors import ModelImportError
from simpletvm.models.base import (
    ImportedModel,
    InputDims,
    TensorSpec,
    normalize_shapes,
    release_frontend,
    static_shapes,
    unsupported_operators_error,
)
from simpletvm.models.onnx_fold import fold_shape_arithmetic
from simpletvm.models.onnx_rewrite import rewrite_for_import
from simpletvm.relax_ir import static_shape

_ONNX_DTYPES = {
    1: "float32",
    2: "uint8",
    3: "int8",
    6: "int32",
    7: "int64",
    9: "bool",
    10: "float16",
    11: "float64",
}


def _value_info_shape(value_info) -> list[int | None]:
    dims = value_info.type.tensor_type.shape.dim
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in dims]


def _input_dims(value_info) -> InputDims:
    """An input's sizes and the symbolic names (dim_param) of the unknown ones."""
    tensor_type = value_info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return InputDims(value_info.name, None)
    return InputDims(
        value_info.name,
        _value_info_shape(value_info),
        [d.dim_param or None for d in tensor_type.shape.dim],
    )


def _dtype(value_info) -> str:
    return _ONNX_DTYPES.get(value_info.type.tensor_type.elem_type, "float32")


def relax_from_onnx(
    model,
    source: str,
    fmt: str,
    input_shapes: Any = None,
    batch_size: int = 1,
    details: dict | None = None,
) -> ImportedModel:
    """Convert an in-memory ``onnx.ModelProto``; weights become Relax constants.

    The model is first rewritten (a copy): its size arithmetic computed at the input
    shapes (:func:`~.onnx_fold.fold_shape_arithmetic`), and Clip and Pad made Relax ops a
    layout conversion can see through (:func:`~.onnx_rewrite.rewrite_for_import`).
    """
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    given = normalize_shapes(input_shapes)
    initializers = {init.name for init in model.graph.initializer}
    graph_inputs = [vi for vi in model.graph.input if vi.name not in initializers]
    names = [vi.name for vi in graph_inputs]
    if given and set(given) - {""} - set(names):
        raise ModelImportError(
            f"input_shapes names {sorted(set(given) - {''} - set(names))}, which {source} "
            f"does not have; its inputs are {names}"
        )
    shapes = static_shapes([_input_dims(vi) for vi in graph_inputs], given, batch_size, source)
    inputs = [TensorSpec(vi.name, shapes[vi.name], _dtype(vi)) for vi in graph_inputs]
    model, folded = fold_shape_arithmetic(erfc_as_erf(model), shapes)
    refuse_unsupported_operators(model, source)
    model, rewrites = rewrite_for_import(model)
    rewrites["folded"] = folded
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - inference is only a convenience for output shapes
        pass
    try:
        mod = from_onnx(
            model,
            shape_dict={spec.name: list(spec.shape) for spec in inputs},
            dtype_dict={spec.name: spec.dtype for spec in inputs},
            keep_params_in_input=False,
        )
    except Exception as error:  # TVM raises many types; all mean "cannot import"
        release_frontend(error)
        raise ModelImportError(
            f"TVM's ONNX frontend cannot import {source} (opset {_opset(model)}): "
            f"{type(error).__name__}: {error}. Try another opset when exporting (13 to "
            "20), or another format (.tflite for TensorFlow models)"
        ) from error
    mod = binary_min_max(mod)
    outputs = [
        TensorSpec(vi.name, tuple(d or 0 for d in _value_info_shape(vi)), _dtype(vi))
        for vi in model.graph.output
    ]
    rewritten = {name: count for name, count in rewrites.items() if count}
    return ImportedModel(
        mod,
        inputs,
        outputs,
        source,
        fmt,
        {**(details or {}), **({"onnx_rewrites": rewritten} if rewritten else {})},
    )


def erfc_as_erf(model):
    """``model``, or a copy whose ``Erfc`` nodes are ``1 - Erf`` (in float32): tf2onnx
    leaves TensorFlow's Erfc (Keras's exact GELU) in the graph as it is, an operator
    ONNX does not have."""
    import onnx
    from onnx import helper

    if not any(node.op_type == "Erfc" for node in model.graph.node):
        return model
    rewritten = onnx.ModelProto()
    rewritten.CopyFrom(model)
    nodes = []
    one = "simpletvm_erfc_one"
    for node in rewritten.graph.node:
        if node.op_type != "Erfc":
            nodes.append(node)
            continue
        erf = f"{node.output[0]}_erf"
        nodes.append(helper.make_node("Erf", [node.input[0]], [erf], name=f"{node.name}_erf"))
        nodes.append(helper.make_node("Sub", [one, erf], list(node.output), name=node.name))
    rewritten.graph.initializer.append(helper.make_tensor(one, onnx.TensorProto.FLOAT, [], [1.0]))
    del rewritten.graph.node[:]
    rewritten.graph.node.extend(nodes)
    return rewritten


def unsupported_operators(model) -> dict[str, tuple[int, str]]:
    """ONNX operator types TVM's frontend has no converter for: type -> (count, the first
    node using it)."""
    # TVM 0.27 has no public list of the ONNX ops its frontend converts; this table is it
    from tvm.relax.frontend.onnx.onnx_frontend import _get_convert_map

    known = _get_convert_map()
    found: dict[str, tuple[int, str]] = {}
    for index, node in enumerate(model.graph.node):
        if node.op_type not in known:
            count, first = found.get(node.op_type, (0, node.name or f"node #{index}"))
            found[node.op_type] = (count + 1, first)
    return found


def refuse_unsupported_operators(model, source: str) -> None:
    """Name every operator TVM cannot import, at once, before the frontend stops at the
    first with a bare error."""
    missing = unsupported_operators(model)
    if not missing:
        return
    raise unsupported_operators_error(
        source,
        f"ONNX, opset {_opset(model)}",
        missing,
        "Try exporting with another opset (13 to 20) or to another format (.tflite for "
        "TensorFlow models), or replace these operators before export",
    )


def _opset(model) -> int | str:
    return next(
        (entry.version for entry in model.opset_import if entry.domain in ("", "ai.onnx")), "?"
    )


def import_onnx_file(path: Path, input_shapes: Any = None, batch_size: int = 1) -> ImportedModel:
    import onnx

    try:
        model = onnx.load(str(path))
    except Exception as error:
        raise ModelImportError(f"{path} is not a readable ONNX model: {error}") from error
    return relax_from_onnx(model, str(path), "onnx", input_shapes, batch_size)


def binary_min_max(mod):
    """TVM's frontend imports a two-input ``Max``/``Min`` as ``max``/``min`` over the
    ``stack`` of both inputs broadcast to the output shape; this gives the equal
    elementwise ``maximum``/``minimum`` instead (no stacked copy, fusable into the
    producer's epilogue, and an op ``ConvertLayout`` converts: its rule for a 5-D stack
    fails on NCHW->NHWC). Returns ``mod`` itself when nothing matched."""
    from tvm import relax
    from tvm.relax.dpl import is_op, is_tuple, wildcard

    changed = False
    for reduce_name, binary in (("relax.max", relax.op.maximum), ("relax.min", relax.op.minimum)):
        lhs, rhs = wildcard(), wildcard()
        stacked = is_op("relax.stack")(
            is_tuple(
                [
                    is_op("relax.broadcast_to")(lhs, wildcard()),
                    is_op("relax.broadcast_to")(rhs, wildcard()),
                ]
            )
        )
        pattern = is_op(reduce_name)(stacked)

        def rewriter(call, matches, lhs=lhs, rhs=rhs, stacked=stacked, binary=binary):
            nonlocal changed
            stack = matches[stacked]
            if (
                int(stack.attrs.axis) != 0
                or call.attrs.keepdims
                or [int(a) for a in call.attrs.axis or []] != [0]
            ):
                return call
            if _broadcast_shape(matches[lhs], matches[rhs]) != static_shape(call):
                return call  # only where the stacked form had the broadcast shape
            result = binary(matches[lhs], matches[rhs])
            changed = True
            return result

        for gvar, func in list(mod.functions_items()):
            if isinstance(func, relax.Function):
                new = relax.dpl.rewrite_call(pattern, rewriter, func)
                if not new.same_as(func):
                    mod = _with_function(mod, gvar, new)
    return relax.transform.DeadCodeElimination()(mod) if changed else mod


def _broadcast_shape(a, b) -> tuple[int, ...] | None:
    import numpy as np

    shapes = static_shape(a), static_shape(b)
    if None in shapes or str(a.ty.dtype) != str(b.ty.dtype):
        return None
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


def _with_function(mod, gvar, func):
    """A copy of ``mod`` with ``gvar`` bound to ``func`` (``mod`` is left as it was)."""
    new = mod.clone()
    new.update_func(gvar, func)
    return new
