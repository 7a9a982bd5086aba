"""The peers the benchmarks time on a model by its short name (the runners themselves are
:mod:`simpletvm.runtime.peers`), and the check that every runner agrees with the
reference before anything is timed."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.common.models import BUILTIN
from simpletvm.runtime.peers import (
    first_output,
    keras_to_onnx,
    onnxruntime_runner,
    openvino_runner,
    tflite_keras_runner,
)


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
