"""Model importers: one entry point, :func:`import_model`, that recognises the source."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from simpletvm.errors import ModelImportError
from simpletvm.models.base import ImportedModel, TensorSpec
from simpletvm.models.zoo import BUILTIN_MODELS, canonical_name

FORMATS = ("builtin", "savedmodel", "graphdef", "keras", "tfhub", "tflite", "onnx")
_SUFFIXES = {
    ".onnx": "onnx",
    ".tflite": "tflite",
    ".pb": "graphdef",
    ".keras": "keras",
    ".h5": "keras",
    ".hdf5": "keras",
}

__all__ = [
    "FORMATS",
    "ImportedModel",
    "TensorSpec",
    "detect_format",
    "import_model",
    "BUILTIN_MODELS",
]


def detect_format(source: Any) -> str:
    """Which importer a source needs; raises ModelImportError naming what is supported."""
    if type(source).__name__ == "ModelProto":
        return "onnx"
    if hasattr(source, "inputs") and hasattr(source, "layers"):
        return "keras"
    if not isinstance(source, (str, Path)):
        raise ModelImportError(
            f"cannot import a {type(source).__name__}: pass a path, a "
            "built-in model name, a TF Hub handle, a Keras model or ModelProto"
        )
    text = str(source)
    if text.startswith(("http://", "https://", "hub:")):
        return "tfhub"
    path = Path(text).expanduser()
    if path.is_dir():
        if (path / "saved_model.pb").exists() or (path / "saved_model.pbtxt").exists():
            return "savedmodel"
        raise ModelImportError(f"{path} is a directory but not a SavedModel (no saved_model.pb)")
    if path.exists():
        if path.name == "saved_model.pb":
            return "savedmodel"
        fmt = _SUFFIXES.get(path.suffix.lower())
        if fmt is None:
            raise ModelImportError(
                f"unknown model format {path.suffix!r} for {path}: supported files are "
                f"{sorted(_SUFFIXES)} and SavedModel directories"
            )
        return fmt
    if canonical_name(text):
        return "builtin"
    raise ModelImportError(
        f"{text!r} is neither an existing file or directory nor a built-in model "
        f"({', '.join(sorted(BUILTIN_MODELS))}) nor a TF Hub URL: check the path"
    )


def import_model(
    source: Any,
    *,
    format: str | None = None,  # noqa: A002 - the natural name for users
    output_name: str | list[str] | None = None,
    output_size: int | None = None,
    input_shapes: Any = None,
    batch_size: int = 1,
    signature: str = "serving_default",
    cache_dir: Path | None = None,
    **options: Any,
) -> ImportedModel:
    """Import any supported source into Relax.

    ``options`` go to built-in models (image_size, classes, seed, alpha).
    """
    fmt = format or detect_format(source)
    if fmt not in FORMATS:
        raise ModelImportError(f"unknown format {fmt!r}: choose one of {list(FORMATS)}")
    if options and fmt != "builtin":
        raise ModelImportError(f"unknown options {sorted(options)} for a {fmt} model")
    if output_name is not None and fmt != "graphdef":
        raise ModelImportError("output_name applies to frozen GraphDef (.pb) files only")
    from simpletvm.models import onnx as onnx_importer
    from simpletvm.models import tensorflow as tf_importer
    from simpletvm.models import tflite as tflite_importer
    from simpletvm.models import zoo

    if fmt == "builtin":
        return zoo.import_builtin(str(source), cache_dir, batch_size=batch_size, **options)
    if fmt == "onnx":
        if type(source).__name__ == "ModelProto":
            imported = onnx_importer.relax_from_onnx(
                source, "<onnx.ModelProto>", "onnx", input_shapes, batch_size
            )
            return replace(imported, origin=source)
        return onnx_importer.import_onnx_file(Path(source), input_shapes, batch_size)
    if fmt == "tflite":
        return tflite_importer.import_tflite_file(Path(source), input_shapes, batch_size)
    if fmt == "graphdef":
        return tf_importer.import_graph_def_file(
            Path(source), output_name, output_size, input_shapes, batch_size
        )
    if fmt == "keras":
        if isinstance(source, (str, Path)):
            return tf_importer.import_keras_file(Path(source), input_shapes, batch_size)
        return tf_importer.import_keras_model(
            source, f"<keras {source.name}>", input_shapes, batch_size
        )
    if fmt == "savedmodel":
        path = Path(source)
        path = path.parent if path.name == "saved_model.pb" else path
        return tf_importer.import_saved_model(path, signature, input_shapes, batch_size)
    return tf_importer.import_hub_module(str(source), signature, input_shapes, batch_size)
