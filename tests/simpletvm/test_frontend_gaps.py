"""Where TVM's frontends or the converters before them fall short, and what the importers
do about it: operators converted in their place, an ONNX graph's size arithmetic
computed at import, a frontend's failure on a valid model named (not called bad input),
both reasons when a Keras model fails both routes, the converters' own log kept off the
terminal, and a Keras model's inputs and outputs in its own order."""

from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from model_factories import make_expand_dims_tflite

from simpletvm import BenchmarkingContext, FrontendError, ModelImportError, SimpleTVM
from simpletvm._process.native_output import VERBOSE_VARIABLE


def untuned(store, source) -> SimpleTVM:
    return SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(source).build(records=None)


def test_expand_dims_is_imported(store, tmp_path):
    x = np.arange(4, dtype="float32").reshape(1, 4)
    got = untuned(store, make_expand_dims_tflite(tmp_path / "expand.tflite")).run(x)
    np.testing.assert_array_equal(got, np.expand_dims(x, 1))


def test_a_frontend_failure_names_its_operator_and_tensor(store, tmp_path, monkeypatch):
    from tvm.relax.frontend.tflite.tflite_frontend import OperatorConverter

    from simpletvm.models.tflite_converter import Converter

    # TVM's own conversion, which fails on every EXPAND_DIMS
    monkeypatch.setattr(Converter, "convert_expand_dims", OperatorConverter.convert_expand_dims)
    with pytest.raises(FrontendError) as caught:
        untuned(store, make_expand_dims_tflite(tmp_path / "expand.tflite"))
    error = caught.value
    assert error.operator == "EXPAND_DIMS" and isinstance(error, ModelImportError)
    assert "failed on operator EXPAND_DIMS (output tensor 'y')" in str(error)
    assert "TypeError: expand_dims()" in str(error) and "not the model's" in str(error)
    assert "builtin operators only" not in str(error)  # the advice for bad input
    copy = pickle.loads(pickle.dumps(error))
    assert (str(copy), copy.operator) == (str(error), error.operator)


@pytest.mark.parametrize("frontend_failed", [False, True], ids=["converter", "frontend"])
def test_a_keras_model_both_routes_fail_on_gives_both_reasons(
    keras_model, monkeypatch, frontend_failed
):
    import tf2onnx

    import simpletvm.models.tflite as tflite_importer
    from simpletvm.models import import_model

    def tflite_route(model):
        if frontend_failed:
            raise FrontendError("TVM's TFLite frontend failed on operator GATHER_ND", "GATHER_ND")
        raise RuntimeError("the TFLite converter gave up on Erfc")

    def onnx_route(*args, **kwargs):
        raise ValueError("tf2onnx gave up on Erfc")

    monkeypatch.setattr(tflite_importer, "keras_to_tflite", tflite_route)
    monkeypatch.setattr(tf2onnx.convert, "from_keras", onnx_route)
    with pytest.raises(ModelImportError) as caught:
        import_model(keras_model)
    message = str(caught.value)
    first = "GATHER_ND" if frontend_failed else "RuntimeError: the TFLite converter gave up"
    assert "through TFLite (" in message and first in message
    assert "nor through ONNX (ValueError: tf2onnx gave up on Erfc)" in message
    assert isinstance(caught.value, FrontendError) == frontend_failed


def test_erfc_left_by_tf2onnx_is_imported(store):
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Erfc", ["x"], ["y"], name="gelu_erfc")],
        "erfc",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 9])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    before = model.SerializeToString()
    x = np.linspace(-3, 3, 9, dtype="float32").reshape(1, 9)
    got = untuned(store, model).run(x)
    np.testing.assert_allclose(got, np.vectorize(math.erfc)(x), rtol=1e-5, atol=1e-6)
    assert model.SerializeToString() == before and isinstance(model, onnx.ModelProto)


def test_size_arithmetic_of_an_unknown_batch_is_computed_at_import(store):
    """As tf2onnx writes a model whose batch was left unknown: pads from a Split of a
    constant (TVM: "Dynamic pads are not supported yet"), a Reshape to the input's batch."""
    from onnx import TensorProto, helper, numpy_helper

    def constant(name, values):
        return helper.make_node(
            "Constant", [], [name], value=numpy_helper.from_array(np.array(values, np.int64))
        )

    nodes = [
        constant("both", [0, 1, 0, 2]),
        constant("halves", [2, 2]),
        helper.make_node("Split", ["both", "halves"], ["first", "second"], axis=0),
        helper.make_node("Concat", ["second", "first"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["padded"]),
        helper.make_node("Shape", ["x"], ["batch"], start=0, end=1),
        constant("rest", [-1]),
        helper.make_node("Concat", ["batch", "rest"], ["target"], axis=0),
        helper.make_node("Reshape", ["padded", "target"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "unknown_batch",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 6])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    stvm = untuned(store, model)
    x = np.arange(1, 4, dtype="float32").reshape(1, 3)
    np.testing.assert_array_equal(stvm.run(x), np.pad(x, [(0, 0), (2, 1)]))
    assert stvm.model.details["onnx_rewrites"]["folded"] == 4  # Split, Concat, Shape, Concat


@pytest.mark.slow
def test_tf2onnx_tracebacks_go_to_the_run_log(store, tmp_path, capfd, monkeypatch):
    """A SavedModel goes through tf2onnx, whose transpose optimizer logs a traceback for
    the scalar added after a convolution (hard_sigmoid's) and converts on."""
    import keras

    monkeypatch.delenv(VERBOSE_VARIABLE, raising=False)
    keras.utils.set_random_seed(0)
    inputs = keras.Input((8, 8, 3))
    model = keras.Model(inputs, keras.layers.Conv2D(4, 3, activation="hard_sigmoid")(inputs))
    model.export(str(tmp_path / "saved"), verbose=False)
    capfd.readouterr()
    stvm = untuned(store, tmp_path / "saved")
    x = np.random.default_rng(0).standard_normal((1, 8, 8, 3)).astype("float32")
    np.testing.assert_allclose(stvm.run(x), model(x), atol=1e-5)
    terminal = capfd.readouterr().err
    log = stvm.context.store.log_path(stvm.context.run_id).read_text()
    assert "max() arg is an empty sequence" in log and "Failed to apply" in log
    assert "max() arg is an empty sequence" not in terminal and "Traceback" not in terminal


@pytest.mark.slow
def test_a_keras_models_inputs_and_outputs_keep_their_order(store):
    """The TFLite converter orders a Keras model's inputs and outputs by none of the
    model's orders (its signature sorts outputs by name: output_10 before output_2)."""
    import keras
    from keras import layers as L

    keras.utils.set_random_seed(0)
    inputs = [keras.Input((4, 4, c), name=n) for n, c in (("zeta", 2), ("alpha", 2), ("mid", 3))]
    outputs = [L.Subtract()(inputs[:2])]
    outputs += [L.Conv2D(channels, 1)(inputs[2]) for channels in range(1, 12)]
    model = keras.Model(inputs, outputs)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((1, *t.shape[1:])).astype("float32") for t in inputs]
    stvm = untuned(store, model)
    assert stvm.model.details["route"] == "tflite"
    assert [spec.name for spec in stvm.model.inputs] == ["zeta", "alpha", "mid"]
    got = stvm.run(arrays)
    assert [array.shape[-1] for array in got] == [2, *range(1, 12)]
    for ours, theirs in zip(got, model(arrays)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-5)
    named = stvm.run(dict(zip(["mid", "zeta", "alpha"], [arrays[2], arrays[0], arrays[1]])))
    np.testing.assert_array_equal(named[0], got[0])
