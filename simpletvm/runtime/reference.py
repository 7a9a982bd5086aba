"""The imported model run again by the framework it came from: what a build's answers are
checked against (:mod:`simpletvm.runtime.accuracy`).

Keras models (objects, ``.keras``/``.h5`` files, the built-in ones) run in Keras;
SavedModels, TF Hub modules and frozen GraphDefs in TensorFlow, as the frozen graph the
importer converted; ``.tflite`` files in TFLite's interpreter; ONNX models in ONNX
Runtime, an optional extra. A model loaded from a saved module has no source at hand.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simpletvm.errors import error_gist
from simpletvm.extras import install_hint
from simpletvm.models import ImportedModel

Run = Callable[[list[np.ndarray]], list[np.ndarray]]

FRAMEWORKS = {
    "keras": "keras",
    "builtin": "keras",
    "savedmodel": "tensorflow",
    "tfhub": "tensorflow",
    "graphdef": "tensorflow",
    "tflite": "tflite",
    "onnx": "onnxruntime",
}


@dataclass(frozen=True)
class Reference:
    """How the source model runs: ``run`` takes the module's inputs, in its order, and
    gives the outputs in its order; ``framework`` names who runs it. Without one (``run``
    None), ``reason`` says why. ``steps`` holds each output's quantization step (in its
    values' units) where the source rounds it to one (:func:`output_steps
    <simpletvm.models.tflite.output_steps>`)."""

    framework: str | None
    run: Run | None = None
    reason: str = ""
    steps: tuple[float | None, ...] = ()

    def describe(self) -> str:
        """The framework, or ``none: <why>``: what the evaluation's ``reference`` says."""
        return self.framework if self.run is not None else f"none: {self.reason}"


def reference_for(model: ImportedModel, threads: int | None = None) -> Reference:
    """The source of ``model`` ready to run, or a Reference without ``run`` saying why
    (a loaded module, an optional framework not installed, a source that cannot be read
    again). ``threads``: TFLite's and ONNX Runtime's (Keras and TensorFlow keep their
    process-wide pools)."""
    framework = FRAMEWORKS.get(model.format)
    if framework is None:
        why = (
            "a module loaded from its saved files keeps no source model: import the model "
            "and build it to compare its answers"
            if model.format == "saved"
            else f"no framework runs {model.format} models here"
        )
        return Reference(None, reason=why)
    try:
        if framework == "keras":
            return Reference(framework, _keras_run(model))
        if framework == "tensorflow":
            return Reference(framework, _tensorflow_run(model))
        if framework == "tflite":
            from simpletvm.models.tflite import output_steps

            flatbuffer = Path(model.source).read_bytes()
            return Reference(
                framework,
                _tflite_run(flatbuffer, model, threads),
                steps=tuple(output_steps(flatbuffer)),
            )
        return Reference(framework, _onnxruntime_run(model, threads))
    except ImportError as error:
        name = error.name or "its framework"
        return Reference(
            None,
            reason=f"{name} is not installed (pip install {name}, or {install_hint('bench')})",
        )
    except Exception as error:  # noqa: BLE001 - any framework's failure: the check is skipped
        return Reference(None, reason=f"{framework} cannot run {model.source}: {error_gist(error)}")


def peers_for(model: ImportedModel, threads: int | None = None) -> tuple[dict, dict]:
    """What else runs ``model``, to time beside SimpleTVM's builds: its own framework
    (:func:`reference_for`) and, for a Keras model that came in through TFLite, TFLite's
    interpreter (XNNPACK) on that conversion. Returns ``{name: run}`` and ``{name: why
    not}`` for those that cannot run here."""
    found, missing = {}, {}
    reference = reference_for(model, threads)
    name = reference.framework or FRAMEWORKS.get(model.format, model.format)
    if reference.run is not None:
        found[name] = reference.run
    else:
        missing[name] = reference.reason
    if FRAMEWORKS.get(model.format) == "keras" and model.details.get("route") == "tflite":
        try:
            from simpletvm.models.tflite import keras_to_tflite

            found["tflite"] = _tflite_run(keras_to_tflite(keras_model_of(model)), model, threads)
        except ImportError as error:
            missing["tflite"] = f"{error.name} is not installed"
        except Exception as error:  # noqa: BLE001 - a peer that cannot run is left out
            missing["tflite"] = f"the TFLite conversion failed: {error_gist(error)}"
    return found, missing


@dataclass(frozen=True)
class Expected:
    """The source's outputs on one set of inputs (None without a reference), with what
    :class:`Reference` says of them: who computed them, their quantization steps."""

    reference: str
    outputs: list[np.ndarray] | None = None
    steps: tuple[float | None, ...] = ()


class SourceOutputs:
    """The source model's outputs on a model's random inputs, computed once per seed of
    them: a model evaluated untuned and then tuned runs its source once. Only the outputs
    are kept, not the runner (a TensorFlow session, ONNX Runtime's thread pool)."""

    def __init__(self, model: ImportedModel):
        self.model = model
        self._by_seed: dict[int, Expected] = {}

    def on(self, seed: int, arrays: list[np.ndarray]) -> Expected:
        """The source's outputs on ``arrays``, the inputs drawn from ``seed``."""
        if seed not in self._by_seed:
            self._by_seed[seed] = self._run(arrays)
        return self._by_seed[seed]

    def _run(self, arrays: list[np.ndarray]) -> Expected:
        reference = reference_for(self.model)
        if reference.run is None:
            return Expected(reference.describe())
        try:
            outputs = reference.run(arrays)
        except Exception as error:  # noqa: BLE001 - any framework's failure: no comparison
            why = f"{reference.framework} failed on {self.model.source}: {error_gist(error)}"
            return Expected(f"none: {why}")
        return Expected(reference.framework, outputs, reference.steps)


def tflite_interpreter(flatbuffer: bytes, threads: int | None = None):
    """TFLite's interpreter with its default XNNPACK delegate, tensors allocated."""
    import tensorflow as tf

    with warnings.catch_warnings():  # its deprecation notice names a package we don't use
        warnings.simplefilter("ignore", UserWarning)
        interpreter = tf.lite.Interpreter(model_content=flatbuffer, num_threads=threads)
    interpreter.allocate_tensors()
    return interpreter


def onnxruntime_session(model: str | bytes, threads: int | None = None):
    """An ONNX Runtime session on its CPU provider (a model's path or serialized bytes);
    ``threads`` sets its intra-op threads. Raises ImportError without onnxruntime."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def keras_model_of(model: ImportedModel):
    """The Keras model the import read, or a built-in one made again from its recorded
    configuration (seeded: the same weights)."""
    if model.origin is not None:
        return model.origin
    from simpletvm.models.zoo import build_keras_model, builtin_recipe

    name, options = builtin_recipe(model.details)  # imported from the zoo's cache
    options.pop("batch_size", None)  # the import's, not the Keras model's
    return build_keras_model(name, **options)


def _keras_run(model: ImportedModel) -> Run:
    """The model in Keras (:func:`keras_model_of`)."""
    keras_model = keras_model_of(model)
    import keras

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        result = keras_model(arrays if len(arrays) > 1 else arrays[0], training=False)
        return [np.asarray(output) for output in keras.tree.flatten(result)]

    return run


def _tensorflow_run(model: ImportedModel) -> Run:
    """The frozen graph the import converted (a SavedModel's signature frozen again), in
    a TensorFlow session fed and fetched by the tensor names the import kept."""
    import tensorflow as tf

    from simpletvm.models.tensorflow import resolve_hub_handle

    inputs = [spec.name for spec in model.inputs]
    outputs = [spec.name for spec in model.outputs]
    if model.format == "graphdef":
        graph_def = tf.compat.v1.GraphDef()
        graph_def.ParseFromString(Path(model.source).read_bytes())
    else:
        from tf2onnx import tf_loader

        path = resolve_hub_handle(model.source) if model.format == "tfhub" else model.source
        signature = model.details.get("signature", "serving_default")
        graph_def, inputs, outputs = tf_loader.from_saved_model(
            str(path), None, None, signatures=[signature]
        )
    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    session = tf.compat.v1.Session(graph=graph)

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        return list(session.run(list(outputs), dict(zip(inputs, arrays))))

    return run


def _tflite_run(flatbuffer: bytes, model: ImportedModel, threads: int | None = None) -> Run:
    """TFLite's interpreter, its inputs resized to the import's static shapes."""
    interpreter = tflite_interpreter(flatbuffer, threads)
    sources = interpreter.get_input_details()
    resized = False
    for detail, spec in zip(sources, model.inputs):
        if tuple(detail["shape"]) != tuple(spec.shape):
            interpreter.resize_tensor_input(detail["index"], list(spec.shape))
            resized = True
    if resized:
        interpreter.allocate_tensors()
    results = interpreter.get_output_details()

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        for detail, array in zip(sources, arrays):
            interpreter.set_tensor(detail["index"], array)
        interpreter.invoke()
        return [interpreter.get_tensor(detail["index"]).copy() for detail in results]

    return run


def _onnxruntime_run(model: ImportedModel, threads: int | None = None) -> Run:
    session = onnxruntime_session(
        model.origin.SerializeToString() if model.origin is not None else model.source, threads
    )
    names = [spec.name for spec in model.inputs]

    def run(arrays: list[np.ndarray]) -> list[np.ndarray]:
        return list(session.run(None, dict(zip(names, arrays))))

    return run
