"""TensorFlow Lite flatbuffers into Relax, through TVM's TFLite frontend.

TFLite graphs are NHWC, the layout whose tuned convolutions run fastest on CPUs (the
vector axis is the channels, not a 7- or 14-wide image row), so Keras models and the
built-in models come this way too (:func:`keras_to_tflite`).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any

import numpy as np

from simpletvm._process.native_output import redirected
from simpletvm.errors import FrontendError, ModelImportError, error_gist
from simpletvm.models.base import (
    ImportedModel,
    InputDims,
    TensorSpec,
    normalize_shapes,
    release_frontend,
    static_shapes,
    unsupported_operators_error,
)

# (no input_shapes advice: the shapes were checked and made static before the frontend)
_ADVICE = (
    "Try converting the model with TFLite's builtin operators only (no Flex/"
    "SELECT_TF_OPS or custom operators), or exporting it to ONNX instead (tf2onnx, "
    "opset 13 to 20) and importing the .onnx"
)
_TFLITE_DTYPES = {
    0: "float32",
    1: "float16",
    2: "int32",
    3: "uint8",
    4: "int64",
    6: "bool",
    9: "int8",
}


def _tensors(subgraph, indices) -> list[tuple[str, list[int | None], str]]:
    found = []
    for index in indices:
        tensor = subgraph.Tensors(index)
        signature = list(tensor.ShapeSignatureAsNumpy()) if tensor.ShapeSignatureLength() else []
        shape = [None if s == -1 else int(s) for s in signature] or [
            int(s) for s in tensor.ShapeAsNumpy()
        ]
        found.append((tensor.Name().decode(), shape, _TFLITE_DTYPES.get(tensor.Type(), "float32")))
    return found


def keras_to_tflite(keras_model) -> bytes:
    """A Keras model as a float32 TFLite flatbuffer; raises what the converter raises.

    (Converting a concrete function of fixed shapes instead leaves READ_VARIABLE ops
    that TVM's frontend rejects.) The converter prints every variable of the model and
    its MLIR passes' log lines; they are kept out of the user's terminal."""
    import tensorflow as tf

    with redirected(os.devnull, fds=(1, 2)):
        return tf.lite.TFLiteConverter.from_keras_model(keras_model).convert()


def relax_from_tflite(
    flatbuffer: bytes,
    source: str,
    fmt: str = "tflite",
    input_shapes: Any = None,
    batch_size: int = 1,
    details: dict | None = None,
    input_names: list[str] | None = None,
    output_keys: list[str] | None = None,
) -> ImportedModel:
    """Convert a TFLite flatbuffer; weights become Relax constants.

    ``input_names`` renames the model's inputs (TFLite calls a Keras input
    ``serving_default_<name>:0``; users call it by its Keras name), and orders them: by
    the flatbuffer's signature, whose input keys are the names the converter was given,
    else in the flatbuffer's order. ``output_keys`` orders the outputs as the
    signature's outputs of those keys (a Keras model's ``output_0``, ``output_1``...).
    The converter lists both in no order of the model's. ``input_shapes`` uses the
    names the inputs end up with.
    """
    import tflite
    from tvm.relax.frontend.tflite import from_tflite

    from simpletvm.models.tflite_converter import Converter, OperatorConversionError

    try:
        model = tflite.Model.GetRootAsModel(flatbuffer, 0)
        subgraph = model.Subgraphs(0)
    except Exception as error:
        raise ModelImportError(f"{source} is not a readable TFLite flatbuffer: {error}") from error
    given = normalize_shapes(input_shapes)
    signature_inputs, signature_outputs = _signature(model)
    input_order = _positions(subgraph.InputsAsNumpy(), signature_inputs, input_names)
    output_order = _positions(subgraph.OutputsAsNumpy(), signature_outputs, output_keys)
    found = _tensors(subgraph, subgraph.InputsAsNumpy())
    names = [name for name, _, _ in found]
    if input_order:
        for name, position in zip(input_names, input_order):
            names[position] = name
    elif input_names and len(input_names) == len(found):
        names = list(input_names)
    if given and set(given) - {""} - set(names):
        raise ModelImportError(
            f"input_shapes names {sorted(set(given) - {''} - set(names))}, which {source} "
            f"does not have; its inputs are {names}"
        )
    # checked here, before TVM's frontend sees a shape the model cannot take
    fixed = static_shapes(
        [InputDims(name, shape) for name, (_, shape, _) in zip(names, found)],
        given,
        batch_size,
        source,
    )
    shapes = {tensor: fixed[name] for name, (tensor, _, _) in zip(names, found)}
    converter = functools.partial(Converter, flatbuffer=flatbuffer)
    refuse_unsupported_operators(converter, model, source)
    try:
        mod = from_tflite(
            model,
            shape_dict=shapes,
            dtype_dict={name: dtype for name, _, dtype in found},
            op_converter=converter,
        )
    except OperatorConversionError as failure:
        release_frontend(failure)
        raise FrontendError(
            f"TVM's TFLite frontend failed on operator {failure.operator} (output tensor "
            f"{failure.tensor!r}) of {source}: {error_gist(failure.cause)}. TVM converts "
            "every operator the model has, so the failure is its frontend's, not the "
            "model's; exporting the model to ONNX (tf2onnx) and importing the .onnx may "
            "avoid it",
            failure.operator,
        ) from failure
    except Exception as error:  # TVM raises many types; all mean "cannot import"
        release_frontend(error)
        raise ModelImportError(
            f"TVM's TFLite frontend cannot import {source} (TFLite): "
            f"{type(error).__name__}: {error}. {_ADVICE}"
        ) from error
    if isinstance(mod, tuple):  # some frontend versions also return params
        mod = mod[0]
    mod = _reordered(transpose_convs_nchw(mod), input_order, output_order)
    inputs = [
        TensorSpec(name, shapes[tensor], dtype) for name, (tensor, _, dtype) in zip(names, found)
    ]
    outputs = [
        TensorSpec(name, tuple(d or batch_size for d in shape), dtype)
        for name, shape, dtype in _tensors(subgraph, subgraph.OutputsAsNumpy())
    ]
    inputs = [inputs[i] for i in input_order] if input_order else inputs
    outputs = [outputs[i] for i in output_order] if output_order else outputs
    return ImportedModel(mod, inputs, outputs, source, fmt, {"layout": "NHWC", **(details or {})})


def _signature(model) -> tuple[dict[str, int], dict[str, int]]:
    """The first signature's inputs and outputs: key -> tensor index ({} without one)."""
    if not model.SignatureDefsLength():
        return {}, {}
    signature = model.SignatureDefs(0)

    def keyed(count, item):
        return {item(i).Name().decode(): item(i).TensorIndex() for i in range(count)}

    return (
        keyed(signature.InputsLength(), signature.Inputs),
        keyed(signature.OutputsLength(), signature.Outputs),
    )


def _positions(tensors, keyed: dict[str, int], keys: list[str] | None) -> list[int] | None:
    """Where the tensors the signature names ``keys`` stand in ``tensors``, in the order
    of ``keys``; None unless ``keys`` name every tensor, in another order."""
    tensors = [int(t) for t in tensors]
    if not keys or sorted(keyed.get(key, -1) for key in keys) != sorted(tensors):
        return None
    order = [tensors.index(keyed[key]) for key in keys]
    return order if order != sorted(order) else None


def _reordered(mod, input_order: list[int] | None, output_order: list[int] | None):
    """``mod`` whose ``main`` takes its parameters in ``input_order`` and returns its
    tuple's fields in ``output_order`` (positions in the present ones)."""
    if not input_order and not output_order:
        return mod
    from tvm import relax

    main = mod["main"]
    params = [main.params[i] for i in input_order] if input_order else main.params
    body, ret_ty = main.body, main.ret_ty
    if output_order:
        result = body.body
        body = relax.SeqExpr(
            body.blocks, relax.Tuple([relax.TupleGetItem(result, i) for i in output_order])
        )
        ret_ty = relax.TupleType([result.ty.fields[i] for i in output_order])
    reordered = mod.clone()
    reordered["main"] = relax.Function(params, body, ret_ty, main.is_pure, main.attrs)
    return relax.transform.CanonicalizeBindings()(relax.transform.Normalize()(reordered))


def refuse_unsupported_operators(converter, model, source: str) -> None:
    """Name every operator TVM cannot import, at once, with its count and the output
    tensor of its first node, before the frontend stops at the first with a bare error."""
    from tvm import relax
    from tvm.relax.frontend.tflite.tflite_frontend import ExprTable

    missing = converter(
        model, model.Subgraphs(0), ExprTable(), relax.BlockBuilder()
    ).unsupported_operators()
    if not missing:
        return
    raise unsupported_operators_error(
        source,
        f"TFLite, schema version {model.Version()}",
        missing,
        f"{_ADVICE}, or replace these operators before conversion",
    )


def transpose_convs_nchw(mod):
    """``mod`` with its NHWC transposed convolutions computed in NCHW between two
    transposes (folded into the weights where constant); ``mod`` itself when it has none.

    TVM's TFLite frontend emits ``conv2d_transpose`` in NHWC (``convert_transpose_conv``)
    but ``relax.transform.LegalizeOps`` lowers it only from NCHW/IOHW
    (``legalize_ops.nn._nn_conv2d_transpose``), so without this a model with
    TRANSPOSE_CONV imports and then fails to build. (CONV_3D_TRANSPOSE is converted in
    NCDHW already, its transposes and weights' permutation folded here too.)"""
    import tvm
    from tvm import relax

    from simpletvm.relax_ir import cancel_permutations, count_calls

    if not count_calls(mod, "relax.nn.conv2d_transpose"):
        if not count_calls(mod, "relax.nn.conv3d_transpose"):
            return mod
        return cancel_permutations(mod)
    converted = tvm.transform.Sequential(
        [
            relax.transform.ConvertLayout({"relax.nn.conv2d_transpose": ["NCHW", "IOHW"]}),
            relax.transform.CanonicalizeBindings(),
        ]
    )(mod)
    return relax.transform.FoldConstant()(cancel_permutations(converted))


def output_steps(flatbuffer: bytes) -> list[float | None]:
    """Each output's quantization step, in the units of its values: 1 for an integer
    output (its values are the quantized ones), the scale of a DEQUANTIZE's input for a
    float output it makes, None for an output computed in floating point. Two correct
    runtimes of a quantized model may round one value a step apart."""
    import tflite

    model = tflite.Model.GetRootAsModel(flatbuffer, 0)
    subgraph = model.Subgraphs(0)
    producers = {}
    for index in range(subgraph.OperatorsLength()):
        operator = subgraph.Operators(index)
        producers.update({int(tensor): operator for tensor in operator.OutputsAsNumpy()})
    steps: list[float | None] = []
    for tensor in subgraph.OutputsAsNumpy():
        dtype = _TFLITE_DTYPES.get(subgraph.Tensors(int(tensor)).Type(), "float32")
        operator = producers.get(int(tensor))
        if not dtype.startswith("float"):
            steps.append(1.0)
        elif (
            operator is not None and _builtin(model, operator) == tflite.BuiltinOperator.DEQUANTIZE
        ):
            quantization = subgraph.Tensors(int(operator.Inputs(0))).Quantization()
            known = quantization is not None and quantization.ScaleLength() > 0
            steps.append(float(np.max(quantization.ScaleAsNumpy())) if known else None)
        else:
            steps.append(None)
    return steps


def _builtin(model, operator) -> int:
    code = model.OperatorCodes(operator.OpcodeIndex())
    return max(code.DeprecatedBuiltinCode(), code.BuiltinCode())


def import_tflite_file(path: Path, input_shapes: Any = None, batch_size: int = 1) -> ImportedModel:
    return relax_from_tflite(path.read_bytes(), str(path), "tflite", input_shapes, batch_size)
