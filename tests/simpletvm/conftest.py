"""Models made by the tests themselves (nothing is downloaded) and an isolated run store."""

from __future__ import annotations

import os
import re

import numpy as np
import psutil
import pytest
from model_factories import make_tiny_cnn_onnx

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# TVM's pool takes half the hardware threads unless told, when it starts, and every test
# process shares one pool: give it the cores, as SimpleTVM does (targets.use_runtime_threads)
os.environ.setdefault("TVM_NUM_THREADS", str(psutil.cpu_count(logical=False) or 1))


@pytest.fixture
def store(tmp_path):
    return tmp_path / "store"


@pytest.fixture(scope="session")
def tiny_onnx(tmp_path_factory):
    return make_tiny_cnn_onnx(tmp_path_factory.mktemp("onnx") / "tiny.onnx")


@pytest.fixture(scope="session")
def keras_model():
    """A small Keras CNN with depthwise conv and batch norm, seeded."""
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((32, 32, 3), name="img")
    x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.DepthwiseConv2D(3, padding="same")(x)
    x = keras.layers.BatchNormalization()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(5, activation="softmax")(x)
    return keras.Model(inputs, outputs)


@pytest.fixture(scope="session")
def image():
    return np.random.default_rng(1).standard_normal((1, 32, 32, 3)).astype("float32")


@pytest.fixture
def check_verdict():
    """Assert that a printed "tuning made it ..." verdict agrees with the untuned and tuned
    latencies printed beside it: its factor is the one they give, its word their direction."""

    def check(text: str, untuned_ms: float, tuned_ms: float) -> None:
        found = re.search(
            r"tuning made it (?:([\d.]+)x (faster|slower) than|as fast as) "
            r"untuned",
            text,
        )
        assert found, text
        factor = f"{max(untuned_ms, tuned_ms) / min(untuned_ms, tuned_ms):.2f}"
        if factor == "1.00":
            assert found.group(1) is None, (found.group(0), untuned_ms, tuned_ms)
            return
        direction = "faster" if tuned_ms < untuned_ms else "slower"
        assert found.groups() == (factor, direction), (found.group(0), untuned_ms, tuned_ms)

    return check


@pytest.fixture
def source_off_by(monkeypatch):
    """``source_off_by(f)``: from then on the source framework answers ``1 + f`` times what
    it computes, so a correct build looks off by ``f / (1 + f)`` (relative error)."""
    from dataclasses import replace

    from simpletvm.runtime import reference

    found = reference.reference_for

    def scale(fraction: float) -> None:
        def scaled(model):
            source = found(model)
            return replace(
                source, run=lambda arrays: [y * (1 + fraction) for y in source.run(arrays)]
            )

        monkeypatch.setattr(reference, "reference_for", scaled)

    return scale
