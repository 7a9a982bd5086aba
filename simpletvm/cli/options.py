"""The words of the options the commands on one model share (the model, its input
shapes, a remote target, the answers' tolerance); those ``superb`` shares too are in
:mod:`simpletvm.cli_options`."""

from __future__ import annotations

import typer

MODEL_HELP = (
    "a model file (.onnx, .tflite, .pb, .keras, .h5), a SavedModel directory, a "
    "TF Hub handle or a built-in name (mobilenet, mobilenetv2, resnet18, resnet50)"
)
MODEL_ARGUMENT = typer.Argument(..., metavar="MODEL", help=MODEL_HELP, show_default=False)
INPUT_SHAPE_HELP = (
    "the sizes of an input's unknown dimensions, its fixed ones as the model "
    "has them: NAME:1,224,224,3 or, for one input, 1,224,224,3 (repeatable)"
)
TRACKER_HELP = "HOST:PORT of a TVM RPC tracker whose servers of --device-key are the target"
TOLERANCE_OPTION = typer.Option(
    None,
    help="the largest relative error of a build's outputs against the model's own framework "
    "(default: 1e-3 for float32, 1e-2 for float16, one step for quantized outputs); "
    "a build over it is refused (exit 4)",
)
DEVICE_KEY_HELP = "the key the target device's RPC servers register under (with --tracker)"
