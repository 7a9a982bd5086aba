"""Built-in test models, made locally with random weights (nothing is downloaded).

The Keras application architectures (MobileNet, MobileNetV2, ResNet-50) plus a
ResNet-18 in Keras, converted once and cached in the run store, so a later run of the
same model does not even start TensorFlow. They are converted to TFLite, whose graphs
stay NHWC (the layout that tunes fastest on CPUs); a model the TFLite route rejects
(MobileNet v1) is converted to ONNX instead.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from simpletvm.errors import ModelImportError
from simpletvm.models.base import ONNX_OPSET, ImportedModel
from simpletvm.models.onnx import relax_from_onnx
from simpletvm.models.tflite import keras_to_tflite, relax_from_tflite
from simpletvm.store import atomic_write_text


def _resnet18(keras, image_size: int, classes: int):
    """ResNet-18 (He et al. 2016, basic blocks [2, 2, 2, 2]); Keras ships no ResNet-18."""
    layers = keras.layers

    def block(x, filters: int, stride: int):
        shortcut = x
        y = layers.Conv2D(filters, 3, stride, padding="same", use_bias=False)(x)
        y = layers.BatchNormalization()(y)
        y = layers.ReLU()(y)
        y = layers.Conv2D(filters, 3, 1, padding="same", use_bias=False)(y)
        y = layers.BatchNormalization()(y)
        if stride != 1 or shortcut.shape[-1] != filters:
            shortcut = layers.Conv2D(filters, 1, stride, use_bias=False)(shortcut)
            shortcut = layers.BatchNormalization()(shortcut)
        return layers.ReLU()(layers.Add()([y, shortcut]))

    inputs = keras.Input((image_size, image_size, 3), batch_size=None, name="input")
    x = layers.Conv2D(64, 7, 2, padding="same", use_bias=False)(inputs)
    x = layers.BatchNormalization()(x)
    x = layers.ReLU()(x)
    x = layers.MaxPooling2D(3, 2, padding="same")(x)
    for filters, stride in (
        (64, 1),
        (64, 1),
        (128, 2),
        (128, 1),
        (256, 2),
        (256, 1),
        (512, 2),
        (512, 1),
    ):
        x = block(x, filters, stride)
    x = layers.GlobalAveragePooling2D()(x)
    outputs = layers.Dense(classes, activation="softmax")(x)
    return keras.Model(inputs, outputs, name="resnet18")


def _application(name: str) -> Callable:
    def make(keras, image_size: int, classes: int, alpha: float = 1.0):
        constructor = getattr(keras.applications, name)
        kwargs = {"alpha": alpha} if "MobileNet" in name else {}
        return constructor(
            input_shape=(image_size, image_size, 3), weights=None, classes=classes, **kwargs
        )

    return make


BUILTIN_MODELS: dict[str, Callable] = {
    "mobilenet": _application("MobileNet"),
    "mobilenetv2": _application("MobileNetV2"),
    "resnet18": _resnet18,
    "resnet50": _application("ResNet50"),
}
ALIASES = {
    "mobilenet_v1": "mobilenet",
    "mobilenet_v2": "mobilenetv2",
    "resnet-18": "resnet18",
    "resnet-50": "resnet50",
    "resnet_18": "resnet18",
    "resnet_50": "resnet50",
}


def canonical_name(name: str) -> str | None:
    key = name.lower()
    key = ALIASES.get(key, key)
    return key if key in BUILTIN_MODELS else None


def build_keras_model(
    name: str, image_size: int = 224, classes: int = 1000, seed: int = 0, **options: Any
):
    """The Keras model behind a built-in name, with seeded random weights."""
    from simpletvm.models.tensorflow import _quiet_tensorflow

    _quiet_tensorflow()
    import keras

    key = canonical_name(name)
    if key is None:
        raise ModelImportError(
            f"no built-in model {name!r}: choose one of {sorted(BUILTIN_MODELS)}"
        )
    keras.utils.set_random_seed(seed)
    try:
        model = BUILTIN_MODELS[key](keras, image_size, classes, **options)
    except TypeError as error:
        raise ModelImportError(f"bad option for built-in model {name!r}: {error}") from error
    _randomize_batch_norm(keras, model, seed)
    return model


def _randomize_batch_norm(keras, model, seed: int) -> None:
    """Give every batch normalization random statistics, like a trained network's.

    With Keras' initial statistics (mean 0, variance 1) the activations of a deep random
    network fade away and MobileNets answer the same uniform softmax to every input,
    which would make comparing outputs across frameworks meaningless.
    """
    rng = np.random.default_rng(seed)
    for layer in model.layers:
        if isinstance(layer, keras.layers.BatchNormalization):
            channels = layer.gamma.shape[0]
            layer.set_weights(
                [
                    rng.uniform(0.5, 1.5, channels),
                    rng.normal(0, 0.1, channels),
                    rng.normal(0, 0.1, channels),
                    rng.uniform(0.5, 1.5, channels),
                ]
            )


def import_builtin(
    name: str,
    cache_dir: Path | None,
    image_size: int = 224,
    classes: int = 1000,
    seed: int = 0,
    batch_size: int = 1,
    **options: Any,
) -> ImportedModel:
    """A built-in model by name; options: image_size, classes, seed, alpha (MobileNets)."""
    key, config, cached = _configuration(
        name, cache_dir, image_size, classes, seed, batch_size, options
    )
    details = {"builtin": config}
    tflite, onnx_file = (
        _cached_file(cached, suffix) if cached else None for suffix in (".tflite", ".onnx")
    )
    if tflite and tflite.exists():
        return relax_from_tflite(
            tflite.read_bytes(),
            key,
            "builtin",
            batch_size=batch_size,
            details={**details, "route": "tflite"},
            input_names=["input"],
        )
    if onnx_file and onnx_file.exists():
        import onnx

        return relax_from_onnx(
            onnx.load(str(onnx_file)),
            key,
            "builtin",
            None,
            batch_size,
            {**details, "route": "onnx"},
        )
    from simpletvm.models.tensorflow import _quiet_tensorflow

    tf = _quiet_tensorflow()
    model = build_keras_model(key, image_size, classes, seed, **options)
    signature = [tf.TensorSpec((batch_size, image_size, image_size, 3), tf.float32, name="input")]
    try:
        flatbuffer = keras_to_tflite(model)
        imported = relax_from_tflite(
            flatbuffer,
            key,
            "builtin",
            batch_size=batch_size,
            details={**details, "route": "tflite"},
            input_names=["input"],
        )
        _cache(cached, ".tflite", config, lambda path: path.write_bytes(flatbuffer))
        return imported
    except Exception:  # noqa: BLE001 - the TFLite route rejects some models: ONNX then
        pass
    import onnx
    import tf2onnx

    onnx_model, _ = tf2onnx.convert.from_keras(model, input_signature=signature, opset=ONNX_OPSET)
    _cache(cached, ".onnx", config, lambda path: onnx.save(onnx_model, str(path)))
    return relax_from_onnx(
        onnx_model, key, "builtin", None, batch_size, {**details, "route": "onnx"}
    )


def builtin_tflite(
    name: str,
    cache_dir: Path | None,
    image_size: int = 224,
    classes: int = 1000,
    seed: int = 0,
    batch_size: int = 1,
    **options: Any,
) -> bytes:
    """A built-in model as a TFLite flatbuffer (to time TFLite on it): the zoo cache's
    when an import of the same configuration made one, else converted from Keras now
    (seconds of TensorFlow). Not cached then: an import takes a cached flatbuffer first,
    and a model imported without one is one the TFLite frontend refused."""
    key, _, cached = _configuration(name, cache_dir, image_size, classes, seed, batch_size, options)
    tflite = _cached_file(cached, ".tflite") if cached else None
    if tflite and tflite.exists():
        return tflite.read_bytes()
    return keras_to_tflite(build_keras_model(key, image_size, classes, seed, **options))


def _configuration(
    name: str,
    cache_dir: Path | None,
    image_size: int,
    classes: int,
    seed: int,
    batch_size: int,
    options: dict[str, Any],
) -> tuple[str, dict[str, Any], Path | None]:
    """A built-in model's canonical name, its configuration (what makes its weights and
    shapes) and the stem its converted files are cached under (None without a cache)."""
    key = canonical_name(name)
    if key is None:
        raise ModelImportError(
            f"no built-in model {name!r}: choose one of {sorted(BUILTIN_MODELS)}"
        )
    config = {
        "name": key,
        "batch_norm": "random",
        "image_size": image_size,
        "classes": classes,
        "seed": seed,
        "batch_size": batch_size,
        **options,
    }
    slug = "-".join(f"{k}={v}" for k, v in sorted(config.items()))
    return key, config, Path(cache_dir) / slug if cache_dir else None


def builtin_recipe(model_details: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The name and ``from_model`` options that import a run's built-in model again,
    from its context's ``model`` entry (a loaded run's too); None for other sources."""
    config = dict(model_details.get("builtin") or {})
    if not config:
        return None
    config.pop("batch_norm", None)  # how the weights are made, not an option
    return config.pop("name"), config


def _cached_file(stem: Path, suffix: str) -> Path:
    """A converted model's file in the zoo cache. Its name, the whole configuration,
    holds dots (``alpha=0.35``): the suffix is appended, never put in place of what
    follows the last dot (which would make every MobileNet of one alpha share a file)."""
    return stem.parent / (stem.name + suffix)


def _cache(cached: Path | None, suffix: str, config: dict, write: Callable[[Path], None]) -> None:
    """Keep a converted model (atomically) with the configuration it was made from."""
    if cached is None:
        return
    cached.parent.mkdir(parents=True, exist_ok=True)
    # a name of this process's: processes converting the same model at once each
    # replace the file with a whole one of their own
    tmp = _cached_file(cached, f"{suffix}.{os.getpid()}.tmp")
    write(tmp)
    tmp.replace(_cached_file(cached, suffix))
    atomic_write_text(_cached_file(cached, ".json"), json.dumps(config, indent=2))
