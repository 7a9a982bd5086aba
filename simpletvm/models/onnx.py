"""ONNX models (files or ModelProto) into Relax; every TensorFlow source ends here too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ModelImportError
from .base import ImportedModel, TensorSpec, normalize_shapes, pick_shape

_ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 6: "int32", 7: "int64", 9: "bool",
                10: "float16", 11: "float64"}


def _value_info_shape(value_info) -> list[int | None]:
    dims = value_info.type.tensor_type.shape.dim
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in dims]


def _dtype(value_info) -> str:
    return _ONNX_DTYPES.get(value_info.type.tensor_type.elem_type, "float32")


def relax_from_onnx(
    model, source: str, fmt: str, input_shapes: Any = None, batch_size: int = 1,
    details: dict | None = None,
) -> ImportedModel:
    """Convert an in-memory ``onnx.ModelProto``; weights become Relax constants."""
    import onnx
    from tvm.relax.frontend.onnx import from_onnx

    given = normalize_shapes(input_shapes)
    initializers = {init.name for init in model.graph.initializer}
    inputs = [
        TensorSpec(vi.name, pick_shape(vi.name, _value_info_shape(vi), given, batch_size),
                   _dtype(vi))
        for vi in model.graph.input
        if vi.name not in initializers
    ]
    if given and set(given) - {""} - {spec.name for spec in inputs}:
        unknown = sorted(set(given) - {""} - {spec.name for spec in inputs})
        raise ModelImportError(
            f"input_shapes names {unknown}, which {source} does not have; "
            f"its inputs are {[spec.name for spec in inputs]}"
        )
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
    except Exception as error:  # noqa: BLE001 - TVM raises many types; all mean "cannot import"
        raise ModelImportError(f"TVM cannot import {source}: {error}") from error
    outputs = [
        TensorSpec(vi.name, tuple(d or 0 for d in _value_info_shape(vi)), _dtype(vi))
        for vi in model.graph.output
    ]
    return ImportedModel(mod, inputs, outputs, source, fmt, dict(details or {}))


def import_onnx_file(path: Path, input_shapes: Any = None, batch_size: int = 1) -> ImportedModel:
    import onnx

    try:
        model = onnx.load(str(path))
    except Exception as error:  # noqa: BLE001
        raise ModelImportError(f"{path} is not a readable ONNX model: {error}") from error
    return relax_from_onnx(model, str(path), "onnx", input_shapes, batch_size)
