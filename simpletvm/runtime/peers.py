"""The peers: each framework a user would otherwise pick, as a call that runs the model once
on a fixed input and returns its output (what a user's inference loop does), made from an
imported model, and held to the model's reference answers before anything is timed.

superb's closing round and the peer benchmarks time these beside SimpleTVM's modules
(:mod:`simpletvm.runtime.comparison`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from simpletvm.errors import SimpleTVMError
from simpletvm.extras import install_hint
from simpletvm.models import ImportedModel
from simpletvm.models.base import ONNX_OPSET

Runner = Callable[[], np.ndarray]

# each peer's name -> what installs it
PEERS = {
    "tflite": "pip install tensorflow",
    "onnxruntime": install_hint("bench") + " (or pip install onnxruntime)",
    "openvino": install_hint("bench") + " (or pip install openvino)",
    "tensorflow": "pip install tensorflow",
}
KERAS_FORMATS = ("keras", "builtin")


class PeerUnavailable(SimpleTVMError):
    """A peer that cannot run a model here; the message says why (and what to install)."""


def unknown_peers(names) -> list[str]:
    """The names in ``names`` that are no peer."""
    return [name for name in names if name not in PEERS]


def first_output(output) -> np.ndarray:
    return np.asarray(output[0] if isinstance(output, (list, tuple)) else output)


def tensorflow_runner(keras_model, example: np.ndarray) -> Runner:
    """The Keras model in graph mode (a concrete ``tf.function``)."""
    import tensorflow as tf

    concrete = tf.function(keras_model).get_concrete_function(
        tf.TensorSpec(example.shape, tf.float32)
    )
    tensor = tf.constant(example)
    return lambda: concrete(tensor).numpy()


def tflite_keras_runner(keras_model, example: np.ndarray, threads: int) -> Runner:
    """The Keras model converted to TFLite, run with its default XNNPACK delegate."""
    from simpletvm.models.tflite import keras_to_tflite
    from simpletvm.runtime.comparison import tflite_runner

    return tflite_runner(keras_to_tflite(keras_model), example, threads)


def onnxruntime_runner(onnx_path: Path, example: np.ndarray, threads: int) -> Runner:
    """ONNX Runtime on its CPU provider (every graph optimization, its default)."""
    from simpletvm.runtime.reference import onnxruntime_session

    session = onnxruntime_session(str(onnx_path), threads)
    name = session.get_inputs()[0].name
    return lambda: session.run(None, {name: example})[0]


def openvino_runner(onnx_path: Path, example: np.ndarray, threads: int) -> Runner:
    """OpenVINO's CPU plugin for one caller: latency hint, one stream, one infer request.

    The precision is pinned to float32: on a CPU with AVX512_BF16 the plugin otherwise
    computes in bfloat16, not the float32 every other framework here runs, and the
    cross-check against the reference does not catch that."""
    import openvino

    core = openvino.Core()
    compiled = core.compile_model(
        core.read_model(str(onnx_path)),
        "CPU",
        {
            "INFERENCE_NUM_THREADS": threads,
            "PERFORMANCE_HINT": "LATENCY",
            "NUM_STREAMS": 1,
            "INFERENCE_PRECISION_HINT": "f32",
        },
    )
    request = compiled.create_infer_request()
    # the input is read in place; the output is copied out, as the other runners do
    return lambda: request.infer({0: example}, share_inputs=True, share_outputs=False)[0]


def keras_to_onnx(keras_model, shape: tuple[int, ...], path: Path) -> Path:
    """The Keras model as ONNX (tf2onnx) for ONNX Runtime and OpenVINO."""
    import tensorflow as tf
    import tf2onnx

    signature = [tf.TensorSpec(shape, tf.float32, name="input")]
    path.parent.mkdir(parents=True, exist_ok=True)
    tf2onnx.convert.from_keras(
        keras_model, input_signature=signature, opset=ONNX_OPSET, output_path=str(path)
    )
    return path


def peer_runner(
    peer: str, model: ImportedModel, example: np.ndarray, threads: int, scratch: Path
) -> Runner:
    """``peer`` running ``model`` (a one-input model) on ``example``. Keras and built-in
    models run in every peer (ONNX Runtime and OpenVINO on their tf2onnx export), ONNX
    files in ONNX Runtime and OpenVINO, ``.tflite`` files in TFLite. Raises
    PeerUnavailable naming the package to install, or the formats the peer reads."""
    if peer not in PEERS:
        raise ValueError(f"unknown peer {peer!r}: choose from {', '.join(PEERS)}")
    try:
        return _make(peer, model, example, threads, scratch)
    except ImportError as error:
        raise PeerUnavailable(
            f"{peer} is not installed ({error.name or error}): {PEERS[peer]}"
        ) from error


def _make(peer: str, model: ImportedModel, example, threads: int, scratch: Path) -> Runner:
    from simpletvm.runtime.comparison import tflite_runner
    from simpletvm.runtime.reference import keras_model_of

    if model.format in KERAS_FORMATS:
        keras_model = keras_model_of(model)
        if peer == "tflite":
            return tflite_keras_runner(keras_model, example, threads)
        if peer == "tensorflow":
            return tensorflow_runner(keras_model, example)
        onnx_path = scratch / f"{Path(str(model.source)).name}.onnx"
        if not onnx_path.exists():
            keras_to_onnx(keras_model, example.shape, onnx_path)
        return _onnx_runner(peer, onnx_path, example, threads)
    if model.format == "onnx" and peer in ("onnxruntime", "openvino"):
        return _onnx_runner(peer, Path(model.source), example, threads)
    if model.format == "tflite" and peer == "tflite":
        return tflite_runner(Path(model.source).read_bytes(), example, threads)
    raise PeerUnavailable(f"{peer} does not run {model.format} models here")


def _onnx_runner(peer: str, onnx_path: Path, example, threads: int) -> Runner:
    make = onnxruntime_runner if peer == "onnxruntime" else openvino_runner
    return make(onnx_path, example, threads)


def peer_error(runner: Runner, expected: np.ndarray) -> tuple[float, float]:
    """The runner's relative error to the model's ``expected`` first output (a NaN or a
    shape apart: infinite), and the tolerance its dtype is held to
    (:mod:`simpletvm.closeness`)."""
    from simpletvm.closeness import default_tolerance, relative_error

    output = first_output(runner())
    tolerance = default_tolerance(str(expected.dtype), float(np.abs(expected).max() or 1.0))
    if output.shape != expected.shape:
        return float("inf"), tolerance
    return relative_error(output, expected)[0], tolerance
