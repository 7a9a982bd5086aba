"""The layer zoo's models: each Keras layer kind the importer maps, built from its
constructor at unit, odd and prime extents (1, 3 and 7 channels, 1xN and Nx1 kernels,
strides 1 and 2, same and valid padding, 1-D to 3-D), grouped one model per input
shape, each layer an output of its own so that a wrong answer names its layer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

SEED = 7


@dataclass(frozen=True)
class Group:
    """Layers applied to the same input (``shapes``, without the batch; several for
    merges): ``layers(inputs)`` gives ``{label: output tensor}``."""

    shapes: tuple[tuple[int, ...], ...]
    layers: Callable


def _conv2d(x):
    from keras import layers as L

    return {
        "1f-3x3-s1-same": L.Conv2D(1, 3, padding="same")(x),
        "7f-1x5-s2-valid": L.Conv2D(7, (1, 5), strides=2)(x),
        "3f-5x1-s2-same": L.Conv2D(3, (5, 1), strides=2, padding="same")(x),
        "7f-3x3-s2-same-relu": L.Conv2D(7, 3, strides=2, padding="same", activation="relu")(x),
        "1f-1x1-s1-valid": L.Conv2D(1, 1)(x),
        "3f-3x3-s1-valid-nobias": L.Conv2D(3, 3, use_bias=False)(x),
        "3f-3x3-dilated2-same": L.Conv2D(3, 3, dilation_rate=2, padding="same")(x),
    }


def _depthwise(x):
    from keras import layers as L

    return {
        "dw-3x3-s1-same": L.DepthwiseConv2D(3, padding="same")(x),
        "dw-1x3-s2-valid-x2": L.DepthwiseConv2D((1, 3), strides=2, depth_multiplier=2)(x),
        "dw-5x1-s1-same-relu6": L.DepthwiseConv2D((5, 1), padding="same", activation="relu6")(x),
        "dw-3x3-dilated2-same": L.DepthwiseConv2D(3, dilation_rate=2, padding="same")(x),
        "sep-7f-3x3-s1-same": L.SeparableConv2D(7, 3, padding="same")(x),
        "sep-1f-3x1-s2-valid": L.SeparableConv2D(1, (3, 1), strides=2)(x),
    }


def _conv1d(x):
    from keras import layers as L

    return {
        "conv-1f-3-s1-same": L.Conv1D(1, 3, padding="same")(x),
        "conv-7f-5-s2-valid": L.Conv1D(7, 5, strides=2)(x),
        "conv-3f-1-s1-valid": L.Conv1D(3, 1)(x),
        "conv-3f-3-dilated2-same": L.Conv1D(3, 3, dilation_rate=2, padding="same")(x),
        "maxpool-2": L.MaxPooling1D(2)(x),
        "avgpool-3-s2-same": L.AveragePooling1D(3, strides=2, padding="same")(x),
        "globalavg": L.GlobalAveragePooling1D()(x),
    }


def _conv3d(x):
    from keras import layers as L

    return {
        "conv-1f-3-s1-same": L.Conv3D(1, 3, padding="same")(x),
        "conv-7f-1x3x1-s2-valid": L.Conv3D(7, (1, 3, 1), strides=2)(x),
        "conv-3f-3x1x1-s1-same": L.Conv3D(3, (3, 1, 1), padding="same")(x),
        "maxpool-2": L.MaxPooling3D(2)(x),
        "avgpool-3-s2-same": L.AveragePooling3D(3, strides=2, padding="same")(x),
    }


def _transposed2d(x):
    from keras import layers as L

    return {
        "1f-3x3-s2-same": L.Conv2DTranspose(1, 3, strides=2, padding="same")(x),
        "7f-1x3-s2-same": L.Conv2DTranspose(7, (1, 3), strides=2, padding="same")(x),
        "3f-3x1-s1-valid": L.Conv2DTranspose(3, (3, 1))(x),
        "3f-1x1-s2-valid": L.Conv2DTranspose(3, 1, strides=2)(x),
        "7f-3x3-s2-valid-relu": L.Conv2DTranspose(7, 3, strides=2, activation="relu")(x),
        "1f-5x5-s1-same": L.Conv2DTranspose(1, 5, padding="same")(x),
    }


def _transposed1d(x):
    from keras import layers as L

    return {
        "1f-3-s2-same": L.Conv1DTranspose(1, 3, strides=2, padding="same")(x),
        "7f-1-s2-valid": L.Conv1DTranspose(7, 1, strides=2)(x),
        "3f-5-s1-valid": L.Conv1DTranspose(3, 5)(x),
    }


def _transposed3d(x):
    from keras import layers as L

    return {
        "1f-3-s2-same": L.Conv3DTranspose(1, 3, strides=2, padding="same")(x),
        "3f-1x3x1-s2-valid": L.Conv3DTranspose(3, (1, 3, 1), strides=2)(x),
        "7f-1-s1-same": L.Conv3DTranspose(7, 1, padding="same")(x),
    }


def _dense(x):
    from keras import layers as L

    return {"1u": L.Dense(1)(x), "3u-relu": L.Dense(3, activation="relu")(x), "7u": L.Dense(7)(x)}


def _pooling(x):
    from keras import layers as L

    return {
        "max-2": L.MaxPooling2D(2)(x),
        "max-3-s2-same": L.MaxPooling2D(3, strides=2, padding="same")(x),
        "avg-2": L.AveragePooling2D(2)(x),
        "avg-3-s2-same": L.AveragePooling2D(3, strides=2, padding="same")(x),
        "avg-1x3-s1-valid": L.AveragePooling2D((1, 3), strides=1)(x),
        "globalavg": L.GlobalAveragePooling2D()(x),
        "globalmax": L.GlobalMaxPooling2D()(x),
        "globalavg-keepdims": L.GlobalAveragePooling2D(keepdims=True)(x),
    }


def _normalization(x):
    from keras import layers as L

    return {
        "batchnorm": L.BatchNormalization()(x),
        "layernorm": L.LayerNormalization()(x),
        "layernorm-hwc": L.LayerNormalization(axis=[1, 2, 3])(x),
    }


def _gelu(x):
    import keras
    from keras import layers as L

    return {
        "exact": L.Activation("gelu")(x),
        "tanh": L.Activation(lambda t: keras.activations.gelu(t, approximate=True))(x),
    }


def _activations(x):
    from keras import layers as L

    return {
        "relu6": L.ReLU(6.0)(x),
        "relu6-activation": L.Activation("relu6")(x),
        "swish": L.Activation("swish")(x),
        "hard-swish": L.Activation("hard_swish")(x),
        "hard-sigmoid": L.Activation("hard_sigmoid")(x),
        "softmax": L.Softmax()(x),
        "softmax-axis1": L.Softmax(axis=1)(x),
        "sigmoid": L.Activation("sigmoid")(x),
        "leaky-relu": L.LeakyReLU(0.1)(x),
    }


def _merge(a, b):
    from keras import layers as L

    return {
        "add": L.Add()([a, b]),
        "multiply": L.Multiply()([a, b]),
        "subtract": L.Subtract()([a, b]),
        "concatenate-channels": L.Concatenate()([a, b]),
        "concatenate-rows": L.Concatenate(axis=1)([b, a]),
    }


def _reshaping(x):
    from keras import layers as L

    return {
        "upsample-2-nearest": L.UpSampling2D(2)(x),
        "upsample-2x3-bilinear": L.UpSampling2D((2, 3), interpolation="bilinear")(x),
        "upsample-3-bilinear": L.UpSampling2D(3, interpolation="bilinear")(x),
        "zeropad-1": L.ZeroPadding2D(1)(x),
        "zeropad-0-2-1-0": L.ZeroPadding2D(((0, 2), (1, 0)))(x),
        "reshape-35x3": L.Reshape((35, 3))(x),
        "flatten": L.Flatten()(x),
        "dense-7u-on-4d": L.Dense(7)(x),
    }


GROUPS = {
    "conv2d": Group(((11, 7, 3),), _conv2d),
    "depthwise": Group(((11, 7, 7),), _depthwise),
    "conv1d": Group(((13, 3),), _conv1d),
    "conv3d": Group(((5, 7, 3, 3),), _conv3d),
    "transposed2d": Group(((7, 5, 3),), _transposed2d),
    "transposed1d": Group(((13, 3),), _transposed1d),
    "transposed3d": Group(((3, 5, 3, 3),), _transposed3d),
    "dense": Group(((7,),), _dense),
    "pooling": Group(((11, 7, 3),), _pooling),
    "normalization": Group(((11, 7, 3),), _normalization),
    "activations": Group(((11, 7, 3),), _activations),
    "gelu": Group(((11, 7, 3),), _gelu),
    "merge": Group(((7, 5, 3), (7, 5, 3)), _merge),
    "reshaping": Group(((7, 5, 3),), _reshaping),
}


def small_cnn():
    """A CNN with one of most kinds, single output."""
    import keras
    from keras import layers as L

    inp = keras.Input((32, 32, 3))
    x = L.ReLU(6.0)(L.BatchNormalization()(L.Conv2D(16, 3, padding="same", use_bias=False)(inp)))
    y = L.Conv2D(16, 1, activation="swish")(L.DepthwiseConv2D(3, padding="same")(x))
    x = L.MaxPooling2D(2)(L.Add()([x, y]))
    z = L.AveragePooling2D(2)(
        L.UpSampling2D(2, interpolation="bilinear")(
            L.Conv2D(8, 3, padding="same", activation="relu")(x)
        )
    )
    x = L.LayerNormalization()(L.Concatenate()([x, z]))
    x = L.Conv2DTranspose(8, 3, strides=2, padding="same")(x)
    return keras.Model(inp, L.Dense(10)(L.GlobalAveragePooling2D()(x)))


def randomize(model, rng: np.random.Generator) -> None:
    """Random biases and normalization statistics (Keras starts them at zeros and ones,
    which would leave their arithmetic untested); kernels keep their seeded initializers."""
    for variable in model.weights:
        name = variable.path.rsplit("/", 1)[-1]
        shape = tuple(variable.shape)
        if name in ("bias", "beta", "moving_mean"):
            variable.assign(rng.normal(0.0, 0.5, shape).astype("float32"))
        elif name in ("gamma", "moving_variance"):
            variable.assign(rng.uniform(0.5, 1.5, shape).astype("float32"))


def build(name: str):
    """(model, inputs, labels): the group ``name`` (or ``"cnn"``) as a seeded Keras
    model, a seeded input for each of its inputs, and its outputs' labels."""
    import keras

    keras.utils.set_random_seed(SEED)
    rng = np.random.default_rng(SEED)
    if name == "cnn":
        model, labels = small_cnn(), ["cnn"]
    else:
        group = GROUPS[name]
        inputs = [keras.Input(shape, name=f"in{i}") for i, shape in enumerate(group.shapes)]
        outputs = group.layers(*inputs)
        model, labels = keras.Model(inputs, list(outputs.values())), list(outputs)
    randomize(model, rng)
    # a spread wide enough for every piece of every activation (hard_sigmoid's saturation)
    arrays = [
        (2.0 * rng.standard_normal((1, *tensor.shape[1:]))).astype("float32")
        for tensor in model.inputs
    ]
    return model, arrays, labels
