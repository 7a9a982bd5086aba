"""NCHW -> NHWC for CPU targets: convert the convolutions, then cancel the transposes.

Tuned NHWC convolutions run faster than NCHW ones on CPUs, 3x3 and depthwise layers
above all (the vector axis becomes the channels instead of a 7- or 14-wide row;
BENCHMARKS.md). ONNX models (and
TensorFlow graphs, which reach TVM through tf2onnx) are NCHW behind a transpose at the
input. :func:`to_nhwc` runs Relax's ``ConvertLayout``, which wraps every converted op in
``permute_dims`` back and forth, then cancels the pairs that meet (two permutations that
compose to the identity) and folds the permutations of constants (weights, biases), so
what is left is a transpose at each boundary of the NHWC region.

Ops ``ConvertLayout`` has no rule for (``call_tir``, ``clip``, ``nn.pad``, ``where``,
``broadcast_to``, a ``reshape`` that really moves data, ...) stay NCHW with a transpose
pair around them; :func:`simpletvm.models.onnx.relax_from_onnx` rewrites the ONNX model
(:mod:`simpletvm.models.onnx_rewrite`) so Clip and Pad do not import as such ops: then
tf2onnx's MobileNetV2 and MobileNet v1 come out with every convolution NHWC and none of
the dozens of transposes TVM's import as is would keep (BENCHMARKS.md).
"""

from __future__ import annotations

import warnings

from simpletvm.errors import error_gist
from simpletvm.relax_ir import calls_of, cancel_permutations, count_calls

# Only the convolutions are named: pools, reductions, elementwise ops, concat, squeeze
# and the rest with a layout rule follow their input's layout (TVM 0.27's pool rules fail
# a check when a desired layout is given for them).
NHWC_LAYOUTS = {"relax.nn.conv2d": ["NHWC", "OHWI"]}


def to_nhwc(mod):
    """``mod`` with its NCHW 2-D convolutions (and what follows them) in NHWC, and stats.

    Returns ``(module, stats)``; stats has ``conv2d_nchw`` (before), ``conv2d_converted``,
    ``conv2d_nchw_left`` and ``permute_dims_before``/``permute_dims_after`` (calls in
    the module). A module with no NCHW convolution (a TFLite import) is returned as is,
    the same object, and so is one whose conversion fails (stats then say ``failed``,
    and a warning is given).
    """
    import tvm
    from tvm import relax

    before = conv2d_layouts(mod)
    stats = {
        "conv2d_nchw": before.get("NCHW", 0),
        "conv2d_converted": 0,
        "conv2d_nchw_left": before.get("NCHW", 0),
        "permute_dims_before": count_calls(mod, "relax.permute_dims"),
    }
    stats["permute_dims_after"] = stats["permute_dims_before"]
    if not stats["conv2d_nchw"]:
        return mod, stats
    try:
        converted = tvm.transform.Sequential(
            [
                relax.transform.ConvertLayout(NHWC_LAYOUTS),
                relax.transform.CanonicalizeBindings(),
            ]
        )(mod)
    except Exception as error:  # noqa: BLE001 - a layout rule that fails: keep the import's
        # (TVM 0.27's rule for relax.stack fails on a 5-D stack of converted tensors)
        stats["failed"] = error_gist(error) or repr(error)
        warnings.warn(f"NHWC conversion failed, keeping NCHW: {stats['failed']}", stacklevel=2)
        return mod, stats
    # FoldConstant puts the constants the cancellation made into their uses (a weight
    # bound to a variable is no weight to the Winograd rewrite), and folds what else is
    # constant; with the permutations already folded it has no kernel left to compile
    converted = relax.transform.FoldConstant()(cancel_permutations(converted))
    after = conv2d_layouts(converted)
    stats["conv2d_nchw_left"] = after.get("NCHW", 0)
    stats["conv2d_converted"] = stats["conv2d_nchw"] - stats["conv2d_nchw_left"]
    stats["permute_dims_after"] = count_calls(converted, "relax.permute_dims")
    return converted, stats


def conv2d_layouts(mod) -> dict[str, int]:
    """How many ``relax.nn.conv2d`` calls the Relax functions of ``mod`` have, by data
    layout."""
    counts: dict[str, int] = {}
    for call in calls_of(mod, "relax.nn.conv2d"):
        layout = str(call.attrs.data_layout)
        counts[layout] = counts.get(layout, 0) + 1
    return counts
