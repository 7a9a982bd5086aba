"""TensorFlow Lite flatbuffers into Relax, through TVM's TFLite frontend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ModelImportError
from .base import ImportedModel, TensorSpec, normalize_shapes, pick_shape

_TFLITE_DTYPES = {0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool",
                  9: "int8"}


def _tensors(subgraph, indices) -> list[tuple[str, list[int | None], str]]:
    found = []
    for index in indices:
        tensor = subgraph.Tensors(index)
        signature = list(tensor.ShapeSignatureAsNumpy()) if tensor.ShapeSignatureLength() else []
        shape = [None if s == -1 else int(s) for s in signature] or [
            int(s) for s in tensor.ShapeAsNumpy()
        ]
        found.append((tensor.Name().decode(), shape, _TFLITE_DTYPES.get(tensor.Type(), "float32")))
    return found


def import_tflite_file(path: Path, input_shapes: Any = None, batch_size: int = 1) -> ImportedModel:
    import tflite
    from tvm.relax.frontend.tflite import from_tflite

    try:
        model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
        subgraph = model.Subgraphs(0)
    except Exception as error:  # noqa: BLE001
        raise ModelImportError(f"{path} is not a readable TFLite flatbuffer: {error}") from error
    given = normalize_shapes(input_shapes)
    inputs = [
        TensorSpec(name, pick_shape(name, shape, given, batch_size), dtype)
        for name, shape, dtype in _tensors(subgraph, subgraph.InputsAsNumpy())
    ]
    outputs = [
        TensorSpec(name, tuple(d or batch_size for d in shape), dtype)
        for name, shape, dtype in _tensors(subgraph, subgraph.OutputsAsNumpy())
    ]
    try:
        mod = from_tflite(
            model,
            shape_dict={spec.name: spec.shape for spec in inputs},
            dtype_dict={spec.name: spec.dtype for spec in inputs},
        )
    except Exception as error:  # noqa: BLE001 - TVM raises many types; all mean "cannot import"
        raise ModelImportError(f"TVM cannot import {path}: {error}") from error
    if isinstance(mod, tuple):  # some frontend versions also return params
        mod = mod[0]
    return ImportedModel(mod, inputs, outputs, str(path), "tflite")
