"""The peers' runners: each framework a user would otherwise pick, as a call that runs the
model once on a fixed input and returns its output (what a user's inference loop does),
and the check that every runner agrees with the reference before anything is timed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.common.models import BUILTIN, keras_to_onnx


def first_output(output) -> np.ndarray:
    return np.asarray(output[0] if isinstance(output, (list, tuple)) else output)


def tensorflow_runner(keras_model, example: np.ndarray) -> Callable[[], np.ndarray]:
    """The Keras model in graph mode (a concrete ``tf.function``)."""
    import tensorflow as tf

    concrete = tf.function(keras_model).get_concrete_function(
        tf.TensorSpec(example.shape, tf.float32)
    )
    tensor = tf.constant(example)
    return lambda: concrete(tensor).numpy()


def tflite_keras_runner(keras_model, example: np.ndarray, threads: int) -> Callable[[], np.ndarray]:
    """The Keras model converted to TFLite, run with its default XNNPACK delegate."""
    from simpletvm.models.tflite import keras_to_tflite
    from simpletvm.runtime.comparison import tflite_runner

    return tflite_runner(keras_to_tflite(keras_model), example, threads)


def onnxruntime_runner(
    onnx_path: Path, example: np.ndarray, threads: int
) -> Callable[[], np.ndarray]:
    """ONNX Runtime on its CPU provider (every graph optimization, its default)."""
    from simpletvm.runtime.reference import onnxruntime_session

    session = onnxruntime_session(str(onnx_path), threads)
    name = session.get_inputs()[0].name
    return lambda: session.run(None, {name: example})[0]


def openvino_runner(onnx_path: Path, example: np.ndarray, threads: int) -> Callable[[], np.ndarray]:
    """OpenVINO's CPU plugin for one caller: latency hint, one stream, one infer request.

    The precision is pinned to float32: on a CPU with AVX512_BF16 the plugin otherwise
    computes in bfloat16, not the float32 every other framework here runs, and the
    cross-check against TensorFlow does not catch that."""
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


def peer_runners(name: str, example: np.ndarray, threads: int, scratch: Path):
    """The peers' runners (TFLite, ONNX Runtime, OpenVINO; TFLite alone for a ``.tflite``
    file) and the reference output every module is checked against. A peer whose package
    is not installed is left out, with a line saying so."""
    from simpletvm.runtime.comparison import tflite_runner

    if name.endswith(".tflite"):
        peers = {"tflite": tflite_runner(Path(name).read_bytes(), example, threads)}
        return peers, first_output(peers["tflite"]())
    from simpletvm.models.zoo import build_keras_model

    model, options = BUILTIN[name]
    keras_model = build_keras_model(model, **options)
    onnx_path = keras_to_onnx(keras_model, example.shape, scratch / f"{name}.onnx")
    makers: dict[str, Callable] = {
        "tflite": lambda: tflite_keras_runner(keras_model, example, threads),
        "onnxruntime": lambda: onnxruntime_runner(onnx_path, example, threads),
        "openvino": lambda: openvino_runner(onnx_path, example, threads),
    }
    peers = {}
    for peer, make in makers.items():
        try:
            peers[peer] = make()
        except ImportError as error:  # an optional peer not installed: go on without it
            print(f"  {peer} not run: {error}", flush=True)
    return peers, np.asarray(keras_model(example))


def checked_outputs(name: str, runners: dict, reference: np.ndarray) -> dict[str, float]:
    """Each runner's largest difference to the reference; stops when one exceeds a
    thousandth of the reference's largest value (a detector's boxes are pixels, a
    softmax's 1e-3), the relative error SimpleTVM's own check allows."""
    scale = float(np.abs(reference).max())
    agreement = {}
    for label, infer in runners.items():
        output = first_output(infer())
        agreement[label] = float(np.abs(output - reference).max())
        if output.shape != reference.shape or agreement[label] > 1e-3 * scale + 1e-6:
            raise SystemExit(
                f"{name}: {label} disagrees with the reference "
                f"(max abs difference {agreement[label]:.3g})"
            )
    return agreement
