"""TensorFlow-family sources into Relax: SavedModel, frozen GraphDef, Keras, TF Hub.

TVM 0.27 has no TensorFlow GraphDef frontend. Keras models go through TFLite first: its
graphs stay NHWC, the layout that tunes fastest on CPUs. What the TFLite route rejects
(MobileNet v1's reshape, SavedModel variables), and the graph formats, are converted to
ONNX with tf2onnx (opset 17) and imported through TVM's ONNX frontend.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from simpletvm._process.native_output import logs_as_native_output
from simpletvm.errors import FrontendError, ModelImportError
from simpletvm.models.base import (
    ONNX_OPSET,
    ImportedModel,
    InputDims,
    normalize_shapes,
    static_shapes,
)
from simpletvm.models.onnx import relax_from_onnx


def _quiet_tensorflow():
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf

    tf.get_logger().setLevel("ERROR")
    return tf


def _tf2onnx_logs():
    """tf2onnx's log, kept with the native output: its optimizers log a warning with a
    traceback for every rewrite they try and give up on (``max() arg is an empty
    sequence`` from its transpose optimizer, on a scalar added after a convolution) and
    convert on; what fails the conversion is raised."""
    return logs_as_native_output("tf2onnx")


def _first_line(error: Exception) -> str:
    return f"{type(error).__name__}: {error}".splitlines()[0][:600]


def _tensor_name(name: str) -> str:
    return name if ":" in name else f"{name}:0"


def _placeholder_shapes(graph_def) -> dict[str, list[int | None]]:
    shapes = {}
    for node in graph_def.node:
        if node.op in ("Placeholder", "PlaceholderWithDefault") and "shape" in node.attr:
            shape = node.attr["shape"].shape
            dims = (
                None if shape.unknown_rank else [d.size if d.size >= 0 else None for d in shape.dim]
            )
            shapes[f"{node.name}:0"] = dims
    return shapes


def _graph_def_to_relax(
    graph_def,
    input_names: list[str],
    output_names: list[str],
    input_shapes: Any,
    batch_size: int,
    source: str,
    fmt: str,
    details: dict | None = None,
) -> ImportedModel:
    import tf2onnx

    given = normalize_shapes(input_shapes)
    if given:  # "x" and "x:0" both name the tensor x:0
        given = {name.removesuffix(":0"): shape for name, shape in given.items()}
    known = _placeholder_shapes(graph_def)
    fixed = static_shapes(
        [InputDims(name.removesuffix(":0"), known.get(name)) for name in input_names],
        given,
        batch_size,
        source,
    )
    shapes = {name: fixed[name.removesuffix(":0")] for name in input_names}
    try:
        with _tf2onnx_logs():
            onnx_model, _ = tf2onnx.convert.from_graph_def(
                graph_def,
                input_names=input_names,
                output_names=output_names,
                opset=ONNX_OPSET,
                shape_override={name: list(shape) for name, shape in shapes.items()},
            )
    except Exception as error:  # tf2onnx raises many types
        raise ModelImportError(f"cannot convert {source} to ONNX: {error}") from error
    return relax_from_onnx(onnx_model, source, fmt, shapes, batch_size, details)


def import_graph_def_file(
    path: Path,
    output_name: str | list[str] | None = None,
    output_size: int | None = None,
    input_shapes: Any = None,
    batch_size: int = 1,
) -> ImportedModel:
    """A frozen GraphDef (``.pb``); ``output_name`` picks the output node(s)."""
    tf = _quiet_tensorflow()
    graph_def = tf.compat.v1.GraphDef()
    try:
        graph_def.ParseFromString(path.read_bytes())
    except Exception as error:
        raise ModelImportError(f"{path} is not a frozen TensorFlow GraphDef: {error}") from error
    nodes = {node.name: node for node in graph_def.node}
    consumed = {inp.split(":")[0].lstrip("^") for node in graph_def.node for inp in node.input}
    sinks = [name for name, node in nodes.items() if name not in consumed and node.op != "NoOp"]
    if output_name is None:
        if len(sinks) != 1:
            raise ModelImportError(
                f"{path} has several possible outputs {sinks[:10]}: pass output_name=..."
            )
        output_name = sinks[0]
    wanted = [output_name] if isinstance(output_name, str) else list(output_name)
    for name in wanted:
        if name.split(":")[0] not in nodes:
            raise ModelImportError(
                f"output_name {name!r} is not a node of {path}; nodes with no consumers "
                f"(likely outputs): {sinks[:10]}"
            )
    inputs = [f"{n.name}:0" for n in graph_def.node if n.op == "Placeholder"]
    model = _graph_def_to_relax(
        graph_def,
        inputs,
        [_tensor_name(n) for n in wanted],
        input_shapes,
        batch_size,
        str(path),
        "graphdef",
    )
    if output_size is not None and model.outputs[0].shape[-1:] != (output_size,):
        raise ModelImportError(
            f"output {wanted[0]!r} of {path} has shape {model.outputs[0].shape}, not "
            f"(..., {output_size}) as output_size says: check output_name"
        )
    return model


def import_saved_model(
    path: Path,
    signature: str = "serving_default",
    input_shapes: Any = None,
    batch_size: int = 1,
    fmt: str = "savedmodel",
    source: str | None = None,
) -> ImportedModel:
    """A TF2 SavedModel directory (also what TF Hub handles resolve to); ``signature``
    picks one of the functions it serves."""
    _quiet_tensorflow()
    from tf2onnx import tf_loader

    available = saved_model_signatures(path)
    if available and signature not in available:
        raise ModelImportError(
            f"the SavedModel at {path} has no signature {signature!r}; it serves "
            f"{available}: pass one as signature=..."
        )
    try:
        with _tf2onnx_logs():
            graph_def, inputs, outputs = tf_loader.from_saved_model(
                str(path), None, None, signatures=[signature]
            )
    except Exception as error:
        raise ModelImportError(
            f"cannot load the SavedModel at {path} (signature {signature!r}): {error}"
        ) from error
    return _graph_def_to_relax(
        graph_def,
        list(inputs),
        list(outputs),
        input_shapes,
        batch_size,
        source or str(path),
        fmt,
        {"signature": signature},
    )


def saved_model_signatures(path: Path) -> list[str]:
    """The signatures a SavedModel serves, read from its saved_model.pb without loading
    the model ([] when it has none, or only a text saved_model.pbtxt)."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = path / "saved_model.pb"
    if not proto.exists():
        return []
    saved = saved_model_pb2.SavedModel()
    try:
        saved.ParseFromString(proto.read_bytes())
    except Exception as error:  # protobuf's DecodeError and friends
        raise ModelImportError(f"{proto} is not a readable SavedModel: {error}") from error
    return sorted(
        {
            name
            for graph in saved.meta_graphs
            for name in graph.signature_def
            if not name.startswith("__")
        }
    )


def import_keras_model(
    model,
    source: str,
    input_shapes: Any = None,
    batch_size: int = 1,
    fmt: str = "keras",
    details: dict | None = None,
) -> ImportedModel:
    """An in-memory Keras model: through TFLite (NHWC), else through ONNX; when both
    fail, the error gives both reasons (a :class:`FrontendError` when TVM's TFLite
    frontend failed on an operator of the model). The model is kept as the import's
    ``origin``, to run again to check a build's answers."""
    tf = _quiet_tensorflow()
    import tf2onnx

    from simpletvm.models.tflite import keras_to_tflite, relax_from_tflite

    names = [
        (getattr(tensor, "name", None) or f"input_{index}").split(":")[0]
        for index, tensor in enumerate(model.inputs)
    ]
    shapes = static_shapes(
        [InputDims(name, list(tensor.shape)) for name, tensor in zip(names, model.inputs)],
        normalize_shapes(input_shapes),
        batch_size,
        source,
    )
    signature = [
        tf.TensorSpec(shapes[name], tensor.dtype, name=name)
        for name, tensor in zip(names, model.inputs)
    ]
    try:
        flatbuffer = keras_to_tflite(model)
        imported = relax_from_tflite(
            flatbuffer,
            source,
            fmt,
            shapes,
            batch_size,
            {**(details or {}), "route": "tflite"},
            input_names=names,
            output_keys=[f"output_{index}" for index in range(len(model.outputs))],
        )
        return replace(imported, origin=model)
    except Exception as error:  # noqa: BLE001 - any TFLite failure: the ONNX route next
        tflite_failure = error
    try:
        with _tf2onnx_logs():
            onnx_model, _ = tf2onnx.convert.from_keras(
                model, input_signature=signature, opset=ONNX_OPSET
            )
        imported = relax_from_onnx(
            onnx_model,
            source,
            fmt,
            None,
            batch_size,
            {**(details or {}), "route": "onnx", "tflite_error": _first_line(tflite_failure)},
        )
    except Exception as error:  # tf2onnx raises many types
        message = (
            f"cannot import Keras model {source} through TFLite ({_first_line(tflite_failure)}) "
            f"nor through ONNX ({_first_line(error)})"
        )
        if isinstance(tflite_failure, FrontendError):
            raise FrontendError(message, tflite_failure.operator) from error
        raise ModelImportError(message) from error
    return replace(imported, origin=model)


def import_keras_file(path: Path, input_shapes: Any = None, batch_size: int = 1) -> ImportedModel:
    """A Keras ``.keras`` or ``.h5`` file."""
    _quiet_tensorflow()
    import keras

    try:
        model = keras.models.load_model(str(path), compile=False)
    except Exception as error:
        raise ModelImportError(f"cannot load the Keras model {path}: {error}") from error
    return import_keras_model(model, str(path), input_shapes, batch_size)


def resolve_hub_handle(handle: str) -> Path:
    """The local directory of a TF Hub handle: a local module directory, or a hub URL
    found in the hub cache (``$TFHUB_CACHE_DIR``). Nothing is fetched when it is cached."""
    local = Path(handle.removeprefix("file://")).expanduser()
    if local.is_dir():
        return local
    _quiet_tensorflow()
    import tensorflow_hub as hub

    try:
        return Path(hub.resolve(handle))
    except Exception as error:  # network and format errors alike
        raise ModelImportError(
            f"cannot resolve TF Hub handle {handle!r}: {error}. Without network access, "
            "put the module in the hub cache ($TFHUB_CACHE_DIR) or pass its local directory"
        ) from error


def import_hub_module(
    handle: str,
    signature: str = "serving_default",
    input_shapes: Any = None,
    batch_size: int = 1,
) -> ImportedModel:
    path = resolve_hub_handle(handle)
    return import_saved_model(path, signature, input_shapes, batch_size, fmt="tfhub", source=handle)
