"""An ONNX graph's shape arithmetic computed at import, at the input shapes it is fixed to.

tf2onnx converts a model exported with its batch unknown into nodes that compute sizes
at run time (``Shape`` of a tensor, then ``Slice``, ``Concat``, ``Split``, arithmetic),
and leaves some arithmetic of constants uncomputed too. TVM's frontend needs some of
those sizes as constants (a ``Pad``'s pads: "Dynamic pads are not supported yet", as in
a ``Conv1DTranspose`` exported so). Once the inputs' shapes are fixed, every ``Shape``
of a tensor whose shape ONNX's inference knows is a constant, and so is each operator of
constants after it: computed here with ONNX's reference evaluator, at the model's
opset, and stored as initializers. Only the operators of size arithmetic
(:data:`FOLDABLE`) are, on at most :data:`MAX_ELEMENTS` elements: a weight's arithmetic
is left to TVM.
"""

from __future__ import annotations

from typing import Any

import numpy as np

FOLDABLE = frozenset(
    "Abs Add Cast Ceil Concat ConstantOfShape Div Equal Expand Floor Gather Greater Identity "
    "Less Max Min Mod Mul Neg Not Range ReduceProd Reshape Shape Sign Size Slice Split "
    "Squeeze Sub Unsqueeze Where".split()
)
MAX_ELEMENTS = 1024


def fold_shape_arithmetic(model, shapes: dict[str, tuple[int, ...]]) -> tuple[Any, int]:
    """``model`` with its graph inputs fixed to ``shapes`` and its shape arithmetic
    computed (a copy; ``model`` itself when nothing was), and how many nodes that removed."""
    import onnx
    from onnx import numpy_helper

    fixed = onnx.ModelProto()
    fixed.CopyFrom(model)
    for value in fixed.graph.input:
        if value.name in shapes:
            dims = value.type.tensor_type.shape.dim
            for dim, size in zip(dims, shapes[value.name]):
                dim.Clear()
                dim.dim_value = int(size)
    static = _static_shapes(fixed)
    opset = next(
        (entry.version for entry in fixed.opset_import if entry.domain in ("", "ai.onnx")), None
    )
    known = {
        init.name: numpy_helper.to_array(init)
        for init in fixed.graph.initializer
        if np.prod(init.dims, dtype=np.int64) <= MAX_ELEMENTS
    }
    kept, folded = [], 0
    for node in fixed.graph.node:
        values = _computed(node, known, static, opset)
        if values is None:
            kept.append(node)
            if node.op_type == "Constant":
                known.update(_constant(node))
            continue
        known.update(zip(node.output, values))
        folded += 1
    if not folded:
        return model, 0
    needed = {name for node in kept for name in node.input}
    needed |= {value.name for value in fixed.graph.output}
    present = {init.name for init in fixed.graph.initializer}
    for name in sorted(needed - present):
        if name in known and not any(name in node.output for node in kept):
            fixed.graph.initializer.append(numpy_helper.from_array(np.asarray(known[name]), name))
    del fixed.graph.node[:]
    fixed.graph.node.extend(kept)
    return fixed, folded


def _computed(node, known: dict, static: dict, opset: int | None) -> list | None:
    """The values of ``node``'s outputs when it is foldable and its inputs are known."""
    if node.domain not in ("", "ai.onnx") or node.op_type not in FOLDABLE:
        return None
    if node.op_type == "Shape":
        shape = static.get(node.input[0])
        if shape is None:
            return None
        attributes = {a.name: a.i for a in node.attribute}
        start, end = attributes.get("start", 0), attributes.get("end", len(shape))
        return [np.asarray(shape[start:end], np.int64)]
    inputs = [name for name in node.input if name]
    if not all(name in known for name in inputs):
        return None
    if sum(np.asarray(known[name]).size for name in inputs) > MAX_ELEMENTS:
        return None
    from onnx.reference import ReferenceEvaluator

    try:
        evaluator = ReferenceEvaluator(node, opsets={"": opset} if opset else None)
        values = evaluator.run(None, {name: known[name] for name in inputs})
    except Exception:  # noqa: BLE001 - what the evaluator cannot compute, TVM is given
        return None
    if any(np.asarray(value).size > MAX_ELEMENTS for value in values):
        return None
    return list(values)


def _constant(node) -> dict:
    from onnx import numpy_helper

    for attribute in node.attribute:
        if attribute.name == "value" and np.prod(attribute.t.dims) <= MAX_ELEMENTS:
            return {node.output[0]: numpy_helper.to_array(attribute.t)}
    return {}


def _static_shapes(model) -> dict[str, tuple[int, ...]]:
    """Every tensor whose shape ONNX's inference knows in full: name -> shape."""
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # noqa: BLE001 - without inference, no Shape is folded
        return {}
    found = {}
    graph = inferred.graph
    for value in [*graph.input, *graph.value_info, *graph.output]:
        dims = value.type.tensor_type.shape.dim
        if value.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            found[value.name] = tuple(int(d.dim_value) for d in dims)
    return found
