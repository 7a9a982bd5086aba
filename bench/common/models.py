"""The models the benchmarks time: SimpleTVM's built-in Keras models by a short name, a
``.tflite`` file as shipped, and the same Keras model exported to ONNX for the peers that
read it."""

from __future__ import annotations

import numpy as np

BUILTIN = {  # name -> (built-in model, its options)
    "mobilenetv2": ("mobilenetv2", {"image_size": 224}),
    "resnet18": ("resnet18", {"image_size": 224}),
    "quickstart": ("mobilenetv2", {"image_size": 96, "alpha": 0.35}),
}


def unknown_models(names: list[str]) -> str | None:
    """A usage error's text if any of ``names`` is not a built-in model, else None."""
    unknown = [name for name in names if name not in BUILTIN]
    if unknown:
        return f"unknown model(s) {', '.join(unknown)}: choose from {', '.join(BUILTIN)}"
    return None


def import_model(name: str, context):
    """A built-in model by its short name, or a ``.tflite`` file, imported in ``context``."""
    from simpletvm import SimpleTVM

    if name.endswith(".tflite"):
        return SimpleTVM(context).from_model(name)
    model, options = BUILTIN[name]
    return SimpleTVM(context).from_model(model, **options)


def model_flops(keras_model) -> int:
    """FLOPs of one batch-1 call: 2 per multiply-add of the Conv2D, DepthwiseConv2D and
    Dense layers (nested models included), from their output shapes and kernels."""
    import keras

    macs = 0
    for layer in keras_model.layers:
        if isinstance(layer, keras.Model):
            macs += model_flops(layer) // 2
            continue
        if not isinstance(
            layer, (keras.layers.Conv2D, keras.layers.DepthwiseConv2D, keras.layers.Dense)
        ):
            continue
        out = [d or 1 for d in layer.output.shape]  # batch None -> 1
        in_channels = layer.input.shape[-1]
        if isinstance(layer, keras.layers.DepthwiseConv2D):
            # every output value: one kh x kw window of its own input channel
            kh, kw = layer.kernel_size
            macs += int(np.prod(out)) * kh * kw
        elif isinstance(layer, keras.layers.Conv2D):
            kh, kw = layer.kernel_size
            macs += int(np.prod(out)) * kh * kw * in_channels // layer.groups
        else:
            macs += int(np.prod(out)) * in_channels
    return 2 * macs
