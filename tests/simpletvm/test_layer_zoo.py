"""Each layer kind the Keras importer maps (:mod:`layer_zoo`), imported from the Keras
model, built untuned with the default schedules and run on a seeded input, against
Keras: relative error below 1e-4 on every layer's output. On a host with AVX-512 the
model is also built for the AVX2 kind (``-mcpu=znver3``, whose code runs here), so both
kinds' default schedules are checked. A subset goes through the files users export too:
a ``.tflite`` from the SavedModel ``model.export`` writes, and a tf2onnx ``.onnx``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from layer_zoo import GROUPS, build

from simpletvm import BenchmarkingContext, SimpleTVM
from simpletvm.closeness import relative_error

TOLERANCE = 1e-4  # tighter than evaluate()'s: one layer leaves its error no room to grow


def _has_avx512() -> bool:
    try:
        return "avx512f" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


# kind -> the LLVM CPU to build for (None: this host's)
KINDS = {"avx512": None, "avx2": "znver3"} if _has_avx512() else {"host": None}
CASES = [*GROUPS, "cnn"]
# the transposed convolutions, a representative rest, and the CNN through tf2onnx, whose
# NCHW graph meets the compiler's layout conversion (its TFLite file imports as the
# Keras route does)
EXPORTED = [
    (name, route)
    for name in ("conv2d", "transposed2d", "transposed1d", "transposed3d", "pooling")
    for route in ("tflite", "onnx")
] + [("cnn", "onnx")]


@dataclass
class Case:
    model: object
    inputs: list[np.ndarray]
    labels: list[str]
    expected: list[np.ndarray]


@pytest.fixture(scope="module")
def zoo():
    """name -> its :class:`Case`, Keras's outputs computed once."""
    made: dict[str, Case] = {}

    def case(name: str) -> Case:
        if name not in made:
            model, inputs, labels = build(name)
            outputs = model(inputs if len(inputs) > 1 else inputs[0])
            outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
            made[name] = Case(model, inputs, labels, [np.asarray(out) for out in outputs])
        return made[name]

    return case


@pytest.fixture(scope="module", autouse=True)
def each_model_converted_once():
    """Every kind imports the same Keras model, whose TFLite conversion does not depend on
    the kind: the importer's conversion of a model is made once, then kept."""
    from simpletvm.models import tflite

    convert = tflite.keras_to_tflite
    made: dict[int, bytes] = {}  # by the model's id: the zoo keeps each model alive

    def once(model) -> bytes:
        if id(model) not in made:
            made[id(model)] = convert(model)
        return made[id(model)]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tflite, "keras_to_tflite", once)
        yield


@pytest.fixture(scope="module")
def exported(zoo, tmp_path_factory):
    """(route, name) -> the file a user's export of the case writes, made once."""
    made: dict[tuple[str, str], Path] = {}
    root = tmp_path_factory.mktemp("exported")

    def path(route: str, name: str) -> Path:
        if (route, name) not in made:
            model = zoo(name).model
            made[route, name] = (export_tflite if route == "tflite" else export_onnx)(
                model, root / name
            )
        return made[route, name]

    return path


def export_tflite(model, stem: Path) -> Path:
    """``model.export`` (a SavedModel, the batch left unknown) converted to ``.tflite``."""
    import tensorflow as tf

    model.export(str(stem), verbose=False)
    path = stem.with_suffix(".tflite")
    path.write_bytes(tf.lite.TFLiteConverter.from_saved_model(str(stem)).convert())
    return path


def export_onnx(model, stem: Path) -> Path:
    """tf2onnx's conversion of ``model``, the batch left unknown."""
    import tensorflow as tf
    import tf2onnx

    path = stem.with_suffix(".onnx")
    signature = [
        tf.TensorSpec((None, *tensor.shape[1:]), tf.float32, name=tensor.name)
        for tensor in model.inputs
    ]
    tf2onnx.convert.from_keras(model, input_signature=signature, opset=17, output_path=str(path))
    return path


def keras_positions(path: Path, names: list[str]) -> list[int]:
    """Which Keras output each of a ``.tflite`` file's outputs (tensors ``names``, in the
    file's order) is, from its signature: the ``output_<k>`` of the SavedModel."""
    import tflite

    model = tflite.Model.GetRootAsModel(path.read_bytes(), 0)
    subgraph, signature = model.Subgraphs(0), model.SignatureDefs(0)
    keys = {
        subgraph.Tensors(signature.Outputs(i).TensorIndex()).Name().decode(): (
            signature.Outputs(i).Name().decode()
        )
        for i in range(signature.OutputsLength())
    }
    return [int(keys[name].removeprefix("output_")) for name in names]


def mismatches(case: Case, got, order: list[int] | None = None) -> list[str]:
    """A line per output that differs from Keras's: its label and the shape or relative
    error (:func:`~simpletvm.closeness.relative_error`, to Keras's)."""
    got = got if isinstance(got, list) else [got]
    if len(got) != len(case.expected):
        return [f"{len(got)} outputs, Keras {len(case.expected)}"]
    order = order or list(range(len(got)))
    found = []
    for position, array in zip(order, got):
        label, expected = case.labels[position], case.expected[position]
        if array.shape != expected.shape:
            found.append(f"{label}: shape {array.shape}, Keras {expected.shape}")
            continue
        error, _ = relative_error(array, expected)
        if not error < TOLERANCE:
            found.append(f"{label}: relative error {error:.2e}")
    return found


def untuned(store, source, cpu_arch: str | None = None) -> SimpleTVM:
    context = BenchmarkingContext("cpu", cpu_arch=cpu_arch, store=store)
    return SimpleTVM(context).from_model(source).build(records=None)


@pytest.mark.slow
@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("name", CASES)
def test_keras_model_matches_keras(store, zoo, name, kind):
    case = zoo(name)
    stvm = untuned(store, case.model, KINDS[kind])
    got = stvm.run(case.inputs if len(case.inputs) > 1 else case.inputs[0])
    problems = mismatches(case, got)
    assert not problems, f"{name} ({kind}, route {stvm.model.details.get('route')}): " + (
        "; ".join(problems)
    )


@pytest.mark.slow
@pytest.mark.parametrize(("name", "route"), EXPORTED, ids=[f"{n}-{r}" for n, r in EXPORTED])
def test_exported_file_matches_keras(store, zoo, exported, name, route):
    case = zoo(name)
    path = exported(route, name)
    stvm = untuned(store, path)
    order = (
        keras_positions(path, [spec.name for spec in stvm.model.outputs])
        if route == "tflite"
        else None
    )
    problems = mismatches(case, stvm.run(case.inputs[0]), order)
    assert not problems, f"{name} ({path.name}): " + "; ".join(problems)
