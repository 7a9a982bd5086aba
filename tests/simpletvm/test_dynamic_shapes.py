"""Models as exported: unknown batch and spatial sizes, ONNX opsets 13 to 20, SavedModels
serving several signatures."""

from __future__ import annotations

import numpy as np
import pytest

from simpletvm import BenchmarkingContext, ModelImportError, SimpleTVM

ATOL = 1e-4


def untuned(store, source, **kwargs) -> SimpleTVM:
    return (
        SimpleTVM(BenchmarkingContext("cpu", store=store))
        .from_model(source, **kwargs)
        .build(records=None)
    )


def onnx_model(opset: int = 13, image=("N", 3, "H", "W"), extra=None):
    """Conv, Clip, Pad, ReduceMean, Squeeze, Gemm: ops whose ONNX definitions changed
    between opsets 13 and 20. ``extra`` adds a second input ``(name, shape)`` added to
    the result."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype("float32"), "w"),
        numpy_helper.from_array((rng.standard_normal((4, 8)) * 0.3).astype("float32"), "fc"),
        numpy_helper.from_array(np.array(0.0, "float32"), "lo"),
        numpy_helper.from_array(np.array(1.5, "float32"), "hi"),
        numpy_helper.from_array(np.array([0, 0, 1, 1, 0, 0, 1, 1], "int64"), "pads"),
        numpy_helper.from_array(np.array([2, 3], "int64"), "hw"),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"]),
        helper.make_node("Clip", ["c", "lo", "hi"], ["r"]),
        helper.make_node("Pad", ["r", "pads"], ["p"], mode="constant"),
        helper.make_node("ReduceMean", ["p"], ["m"], axes=[2, 3], keepdims=1),
        helper.make_node("Squeeze", ["m", "hw"], ["s"]),
        helper.make_node("Gemm", ["s", "fc"], ["y" if extra is None else "g"], transB=1),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(image))]
    if extra is not None:
        inputs.append(helper.make_tensor_value_info(extra[0], TensorProto.FLOAT, list(extra[1])))
        nodes.append(helper.make_node("Add", ["g", extra[0]], ["y"]))
    graph = helper.make_graph(
        nodes,
        "dynamic",
        inputs,
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
        weights,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=7)
    if opset != 13:
        model = onnx.version_converter.convert_version(model, opset)
    onnx.checker.check_model(model)
    return model


def onnxruntime_output(model, feeds):
    import onnxruntime

    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    return session.run(None, feeds)[0]


def test_unknown_sizes_are_all_listed_with_the_input_shapes_to_pass(store):
    model = onnx_model(extra=("bias", ["N", "classes"]))
    with pytest.raises(ModelImportError) as error:
        untuned(store, model)
    message = str(error.value)
    for unknown in ("'x' axis 2 ('H')", "'x' axis 3 ('W')", "'bias' axis 1 ('classes')"):
        assert unknown in message
    assert "'x' axis 0" not in message  # the batch takes batch_size
    assert "input_shapes={'x': [1, 3, <H>, <W>], 'bias': [1, <classes>]}" in message


def test_input_shapes_fix_batch_and_spatial_sizes(store):
    model = onnx_model()
    x = np.random.default_rng(1).standard_normal((2, 3, 20, 24)).astype("float32")
    stvm = untuned(store, model, input_shapes={"x": x.shape})
    assert stvm.model.inputs[0].shape == (2, 3, 20, 24)
    np.testing.assert_allclose(stvm.run(x), onnxruntime_output(model, {"x": x}), atol=ATOL)


def test_an_unknown_batch_alone_takes_batch_size(store):
    model = onnx_model(image=("batch", 3, 16, 16))
    stvm = untuned(store, model, batch_size=3)
    assert stvm.model.inputs[0].shape == (3, 3, 16, 16)


def test_input_shapes_for_an_input_the_model_lacks_names_its_inputs(store):
    with pytest.raises(
        ModelImportError, match=r"input_shapes names \['image'\].*inputs are \['x'\]"
    ):
        untuned(store, onnx_model(), input_shapes={"image": (1, 3, 16, 16)})


@pytest.mark.parametrize("opset", range(13, 21))
def test_onnx_opsets_13_to_20_import_and_match_onnxruntime(store, opset):
    model = onnx_model(opset, image=(1, 3, 16, 16))
    assert model.opset_import[0].version == opset
    x = np.random.default_rng(opset).standard_normal((1, 3, 16, 16)).astype("float32")
    stvm = untuned(store, model)
    np.testing.assert_allclose(stvm.run(x), onnxruntime_output(model, {"x": x}), atol=ATOL)


@pytest.fixture(scope="module")
def two_signatures(tmp_path_factory):
    """A SavedModel serving a convolution over images of any size (serving_default) and a
    dense layer over feature vectors (embed)."""
    import tensorflow as tf

    class Model(tf.Module):
        def __init__(self):
            rng = np.random.default_rng(0)
            self.kernel = tf.Variable(rng.standard_normal((3, 3, 3, 4)).astype("float32"))
            self.dense = tf.Variable(rng.standard_normal((8, 2)).astype("float32"))

        @tf.function(
            input_signature=[tf.TensorSpec([None, None, None, 3], tf.float32, name="image")]
        )
        def conv(self, image):
            return {"y": tf.nn.relu(tf.nn.conv2d(image, self.kernel, 1, "SAME"))}

        @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="features")])
        def embed(self, features):
            return {"z": tf.matmul(features, self.dense)}

    model = Model()
    path = tmp_path_factory.mktemp("tf") / "two_signatures"
    tf.saved_model.save(
        model, str(path), signatures={"serving_default": model.conv, "embed": model.embed}
    )
    return path, model


@pytest.mark.slow
def test_saved_model_signatures_are_chosen_by_name(store, two_signatures):
    path, model = two_signatures
    with pytest.raises(
        ModelImportError,
        match=r"'image' axis 1, 'image' axis 2.*"
        r"input_shapes=\{'image': \[1, <size>, <size>, 3\]\}",
    ):
        untuned(store, path)
    image = np.random.default_rng(2).standard_normal((1, 12, 10, 3)).astype("float32")
    default = untuned(store, path, input_shapes={"image:0": image.shape})
    np.testing.assert_allclose(default.run(image), model.conv(image)["y"].numpy(), atol=ATOL)
    features = np.random.default_rng(3).standard_normal((2, 8)).astype("float32")
    embed = untuned(store, path, signature="embed", batch_size=2)
    np.testing.assert_allclose(embed.run(features), model.embed(features)["z"].numpy(), atol=ATOL)
    assert embed.context.model["signature"] == "embed"


@pytest.mark.slow
def test_an_unknown_signature_lists_those_the_saved_model_serves(store, two_signatures):
    path, _ = two_signatures
    with pytest.raises(
        ModelImportError,
        match=r"no signature 'predict'; it serves "
        r"\['embed', 'serving_default'\]",
    ):
        untuned(store, path, signature="predict")
