"""Every import source against the source framework's own outputs on the same input."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest
import tvm
from model_factories import make_tiny_cnn_onnx

from simpletvm import BenchmarkingContext, ModelImportError, SimpleTVM
from simpletvm.models import detect_format

ATOL = 1e-4


def untuned(store, source, **kwargs) -> SimpleTVM:
    return (
        SimpleTVM(BenchmarkingContext("cpu", store=store))
        .from_model(source, **kwargs)
        .build(records=None)
    )


@pytest.fixture(scope="session")
def tf_files(tmp_path_factory, keras_model):
    """The same Keras model saved in every TensorFlow format, plus its reference output."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    root = tmp_path_factory.mktemp("tf")
    keras_model.save(root / "model.keras")
    keras_model.save(root / "model.h5")
    keras_model.export(str(root / "saved_model"), verbose=False)
    (root / "model.tflite").write_bytes(
        tf.lite.TFLiteConverter.from_keras_model(keras_model).convert()
    )
    function = tf.function(lambda x: keras_model(x)).get_concrete_function(
        tf.TensorSpec((None, 32, 32, 3), tf.float32, name="x")
    )
    frozen = convert_variables_to_constants_v2(function)
    tf.io.write_graph(frozen.graph.as_graph_def(), str(root), "frozen.pb", as_text=False)
    output_node = frozen.outputs[0].name.split(":")[0]
    return {"root": root, "output_node": output_node}


@pytest.mark.parametrize("name", ["model.keras", "model.h5", "saved_model", "model.tflite"])
@pytest.mark.slow
def test_tensorflow_files_match_keras(store, tf_files, keras_model, image, name):
    stvm = untuned(store, tf_files["root"] / name)
    np.testing.assert_allclose(stvm.run(image), keras_model(image).numpy(), atol=ATOL)
    assert stvm.model.inputs[0].shape == (1, 32, 32, 3)
    assert stvm.model.outputs[0].shape[-1] == 5


@pytest.mark.parametrize(
    "name,framework",
    [
        ("model.keras", "keras"),
        ("saved_model", "tensorflow"),
        ("frozen.pb", "tensorflow"),
        ("model.tflite", "tflite"),
    ],
)
@pytest.mark.slow
def test_each_source_is_checked_against_its_own_framework(store, tf_files, name, framework):
    options = {"output_name": tf_files["output_node"]} if name == "frozen.pb" else {}
    answers = untuned(store, tf_files["root"] / name, **options).check_answers()
    assert answers["reference"] == framework
    assert 0 <= answers["max_rel_error"] < 1e-5


@pytest.mark.slow
def test_frozen_graphdef_with_output_name(store, tf_files, keras_model, image):
    stvm = untuned(
        store, tf_files["root"] / "frozen.pb", output_name=tf_files["output_node"], output_size=5
    )
    assert stvm.model.format == "graphdef"
    np.testing.assert_allclose(stvm.run(image), keras_model(image).numpy(), atol=ATOL)


@pytest.mark.slow
def test_frozen_graphdef_wrong_output_name_lists_candidates(store, tf_files):
    with pytest.raises(ModelImportError, match="not a node.*likely outputs.*Identity"):
        untuned(store, tf_files["root"] / "frozen.pb", output_name="no_such_layer")


@pytest.mark.slow
def test_frozen_graphdef_wrong_output_size(store, tf_files):
    with pytest.raises(ModelImportError, match="output_size"):
        untuned(
            store,
            tf_files["root"] / "frozen.pb",
            output_name=tf_files["output_node"],
            output_size=1000,
        )


@pytest.mark.slow
def test_keras_object(store, keras_model, image):
    stvm = untuned(store, keras_model)
    np.testing.assert_allclose(stvm.run(image), keras_model(image).numpy(), atol=ATOL)


@pytest.mark.slow
def test_tf_hub_local_module_directory(store, tf_files, keras_model, image):
    stvm = untuned(store, str(tf_files["root"] / "saved_model"), format="tfhub")
    assert stvm.model.format == "tfhub"
    np.testing.assert_allclose(stvm.run(image), keras_model(image).numpy(), atol=ATOL)


@pytest.mark.slow
def test_tf_hub_url_resolved_through_the_hub_cache(
    store, tf_files, keras_model, image, tmp_path, monkeypatch
):
    import shutil

    handle = "https://tfhub.dev/simpletvm/tiny-cnn/1"
    cache = tmp_path / "hub-cache"
    shutil.copytree(
        tf_files["root"] / "saved_model", cache / hashlib.sha1(handle.encode("utf8")).hexdigest()
    )
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(cache))
    stvm = untuned(store, handle)
    assert stvm.model.format == "tfhub" and stvm.model.source == handle
    np.testing.assert_allclose(stvm.run(image), keras_model(image).numpy(), atol=ATOL)


def test_tf_hub_url_not_cached_says_how_to_fix(store, tmp_path, monkeypatch):
    monkeypatch.setenv("TFHUB_CACHE_DIR", str(tmp_path / "empty-cache"))
    with pytest.raises(ModelImportError, match="TFHUB_CACHE_DIR"):
        untuned(store, "https://tfhub.dev/simpletvm/not-cached/1")


def test_onnx_file_matches_onnxruntime(store, tiny_onnx):
    import onnxruntime

    x = np.random.default_rng(2).standard_normal((1, 3, 32, 32)).astype("float32")
    expected = onnxruntime.InferenceSession(str(tiny_onnx)).run(None, {"x": x})[0]
    stvm = untuned(store, tiny_onnx)
    np.testing.assert_allclose(stvm.run({"x": x}), expected, atol=ATOL)


def _not_again(*args, **kwargs):
    raise AssertionError("the cached configuration was converted again")


@pytest.mark.parametrize(
    "name,options",
    [
        ("mobilenet", {"alpha": 0.25}),
        ("mobilenetv2", {"alpha": 0.35}),
        ("resnet18", {}),
        ("resnet50", {}),
    ],
)
@pytest.mark.slow
def test_builtin_models_match_keras(store, name, options, monkeypatch):
    from simpletvm.models import zoo
    from simpletvm.models.zoo import build_keras_model

    x = np.random.default_rng(3).standard_normal((1, 32, 32, 3)).astype("float32")
    reference = build_keras_model(name, image_size=32, classes=10, seed=7, **options)
    stvm = untuned(store, name, image_size=32, classes=10, seed=7, **options)
    assert stvm.model.format == "builtin"
    expected = reference(x).numpy()
    assert expected.std() > 1e-4 * expected.mean()  # outputs that depend on the input
    np.testing.assert_allclose(stvm.run(x), expected, atol=ATOL)
    # the second import comes from the machine's cache, without building the Keras model
    # again: the same module, weights included (constants compare by value)
    monkeypatch.setattr(zoo, "build_keras_model", _not_again)
    cached = SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(
        name, image_size=32, classes=10, seed=7, **options
    )
    tvm.ir.assert_structural_equal(cached.model.mod, stvm.model.mod)


@pytest.mark.slow
def test_the_cache_keeps_each_configuration_of_a_builtin_apart(tmp_path):
    """Two image sizes of one MobileNet width: a file each, and each import gets its
    own model back (the configuration's dots, as in alpha=0.35, are not a suffix)."""
    from simpletvm.models import import_model

    shapes = {
        size: import_model(
            "mobilenetv2", cache_dir=tmp_path, image_size=size, alpha=0.35, classes=10
        )
        .inputs[0]
        .shape
        for size in (32, 40)
    }
    assert len(list(tmp_path.glob("*.tflite"))) == len(list(tmp_path.glob("*.json"))) == 2
    for size in (32, 40):  # now from the cache
        cached = import_model(
            "mobilenetv2", cache_dir=tmp_path, image_size=size, alpha=0.35, classes=10
        )
        assert cached.inputs[0].shape == shapes[size] == (1, size, size, 3)


def test_tflite_of_a_builtin_is_the_flatbuffer_its_import_cached(tmp_path, monkeypatch):
    """The quickstart times TFLite on what its import converted, not on a conversion of
    its own; a configuration not imported (or imported through ONNX) is converted then."""
    from simpletvm.models import zoo

    monkeypatch.setattr(zoo, "build_keras_model", lambda name, *args, **options: name)
    monkeypatch.setattr(zoo, "keras_to_tflite", lambda model: b"the import's conversion")
    monkeypatch.setattr(zoo, "relax_from_tflite", lambda flatbuffer, *args, **kw: flatbuffer)
    options = {"image_size": 32, "alpha": 0.35, "classes": 10}
    assert zoo.import_builtin("mobilenetv2", tmp_path, **options) == b"the import's conversion"
    monkeypatch.setattr(zoo, "keras_to_tflite", lambda model: b"converted again")
    assert zoo.builtin_tflite("mobilenetv2", tmp_path, **options) == b"the import's conversion"
    assert (
        zoo.builtin_tflite("mobilenetv2", tmp_path, **{**options, "image_size": 40})
        == b"converted again"
    )
    assert zoo.builtin_tflite("mobilenetv2", None, **options) == b"converted again"


def test_input_shape_fixes_unknown_dimensions(store, tmp_path):
    import onnx

    path = make_tiny_cnn_onnx(tmp_path / "dynamic.onnx")
    model = onnx.load(str(path))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[2].dim_param, dims[3].dim_param = "height", "width"
    onnx.save(model, str(path))
    with pytest.raises(ModelImportError, match="unknown dimension.*input_shapes"):
        untuned(store, path)
    stvm = untuned(store, path, input_shapes={"x": (1, 3, 16, 16)})
    assert stvm.run(np.zeros((1, 3, 16, 16), "float32")).shape == (1, 10)


class TestBadSources:
    def test_missing_file(self, store):
        with pytest.raises(ModelImportError, match="neither an existing file.*built-in"):
            untuned(store, "/no/such/model.pb")

    def test_unknown_format(self, store, tmp_path):
        path = tmp_path / "model.xyz"
        path.write_text("?")
        with pytest.raises(ModelImportError, match="unknown model format '.xyz'"):
            untuned(store, path)

    def test_corrupt_onnx(self, store, tmp_path):
        path = tmp_path / "broken.onnx"
        path.write_bytes(b"\x00not onnx at all")
        with pytest.raises(ModelImportError, match="not a readable ONNX model"):
            untuned(store, path)

    def test_directory_that_is_no_saved_model(self, store, tmp_path):
        with pytest.raises(ModelImportError, match="not a SavedModel"):
            detect_format(tmp_path)

    def test_unsupported_operator_is_named(self, store, tmp_path):
        import onnx
        from onnx import TensorProto, helper

        node = helper.make_node("FancyNewOp", ["x"], ["y"], domain="com.example")
        graph = helper.make_graph(
            [node],
            "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
        )
        model = helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)],
        )
        path = tmp_path / "custom.onnx"
        onnx.save(model, str(path))
        with pytest.raises(ModelImportError, match="FancyNewOp"):
            untuned(store, path)

    def test_unknown_builtin_option(self, store):
        with pytest.raises(ModelImportError, match="bad option"):
            untuned(store, "resnet18", alpha=0.5, image_size=32)

    def test_output_name_only_for_graphdef(self, store, tiny_onnx):
        with pytest.raises(ModelImportError, match="output_name applies to frozen GraphDef"):
            untuned(store, tiny_onnx, output_name="y")


def test_an_onnx_model_with_unsupported_operators_names_each_with_count_and_first_node():
    from onnx import TensorProto, helper

    from simpletvm.models import import_model

    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("FancyNorm", ["a"], ["b"], name="fancy_1"),
        helper.make_node("FancyNorm", ["b"], ["c"], name="fancy_2"),
        helper.make_node("Warp", ["c"], ["y"], name="warp"),
    ]
    graph = helper.make_graph(
        nodes,
        "custom",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelImportError) as caught:
        import_model(model)
    message = str(caught.value)
    assert (
        "(ONNX, opset 17): unsupported operators FancyNorm x2 (first: 'fancy_1'), "
        "Warp x1 (first: 'warp')"
    ) in message
    assert "another opset" in message and "Relu" not in message
