"""The operator converter SimpleTVM gives TVM's TFLite frontend (its ``op_converter`` hook).

It reads TFLite models as converters and vendors ship them, where TVM's own
``OperatorConverter`` does not:

- buffers stored after the flatbuffer (``Buffer.offset``/``size``, for models over 2 GB
  or written with that option), which TVM reads as empty;
- sparse constants (``Tensor.sparsity``), decoded to dense at import whichever operator
  reads them (DENSIFY, DEQUANTIZE or a kernel);
- MediaPipe's custom operators (:mod:`.tflite_mediapipe`), through the frontend's
  ``allow_custom_ops`` switch and a ``CUSTOM`` entry in its conversion table;
- transposed convolutions whose output shape is computed at run time, as Keras exports
  them, at the output shape they are given (:mod:`.tflite_transpose_conv`);
- GELU with ``approximate`` set, the tanh form, which TVM's conversion computes exactly;
- EXPAND_DIMS, which TVM's conversion fails on whatever its input, and
  SPACE_TO_BATCH_ND and BATCH_TO_SPACE_ND (dilated convolutions), which it converts to
  calls no runtime has (:mod:`.tflite_space_batch`).

An operator whose conversion fails raises :class:`OperatorConversionError`, naming it.

Imported lazily: it subclasses a TVM class.
"""

from __future__ import annotations

import functools

import numpy as np
import tflite
import tvm
from tflite.Conv3DOptions import Conv3DOptions
from tflite.GeluOptions import GeluOptions
from tflite.TransposeConvOptions import TransposeConvOptions
from tvm import relax
from tvm.relax.frontend.tflite.tflite_frontend import OperatorConverter, to_int_list

from simpletvm.errors import SimpleTVMError
from simpletvm.models import tflite_mediapipe as mediapipe
from simpletvm.models import tflite_space_batch as space_batch
from simpletvm.models import tflite_transpose_conv as transpose_conv
from simpletvm.models.tflite_sparse import densify
from simpletvm.relax_ir import static_shape

_CUSTOM = 32  # tflite.BuiltinOperator.CUSTOM
_DETECTION_POSTPROCESS = "TFLite_Detection_PostProcess"  # custom code TVM converts itself
_SAME = 0  # tflite.Padding.SAME


class OperatorConversionError(SimpleTVMError):
    """TVM's frontend failed on one operator: its name, the output tensor of its node,
    and what failed (the ``__cause__``)."""

    def __init__(self, operator: str, tensor: str, cause: str) -> None:
        super().__init__(f"{operator} (output tensor {tensor!r}): {cause}")
        self.operator, self.tensor, self.cause = operator, tensor, cause

    def __reduce__(self):
        return type(self), (self.operator, self.tensor, self.cause)


class StoredBuffer:
    """Data of a buffer kept outside the flatbuffer, with the two readers TVM's frontend
    calls on a ``tflite.Buffer``."""

    def __init__(self, data: bytes):
        self.data = data

    def DataAsNumpy(self) -> np.ndarray:
        return np.frombuffer(self.data, np.uint8)

    def DataLength(self) -> int:
        return len(self.data)


class Converter(OperatorConverter):
    """TVM's TFLite operator converter with SimpleTVM's additions (see the module)."""

    def __init__(self, model, subgraph, exp_tab, ctx, conversion_state=None, *, flatbuffer: bytes):
        super().__init__(model, subgraph, exp_tab, ctx, conversion_state)
        self.flatbuffer = flatbuffer
        self.allow_custom_ops = True
        self.convert_map["CUSTOM"] = self.convert_custom
        self.custom_converters = {
            "Convolution2DTransposeBias": self.convert_transpose_conv_bias,
            "MaxPoolingWithArgmax2D": self.convert_max_pool_with_argmax,
            "MaxUnpooling2D": self.convert_max_unpooling,
            _DETECTION_POSTPROCESS: self.convert_map["DETECTION_POSTPROCESS"],
        }
        self.convert_map = {
            name: functools.partial(self.convert_naming_failures, convert)
            for name, convert in self.convert_map.items()
        }

    def convert_naming_failures(self, convert, op):
        """``convert(op=op)``, raising :class:`OperatorConversionError` when it fails. (A
        method, not a closure: a failure's frames would keep a closure's converter, and
        the block builder it left open, alive.)"""
        try:
            return convert(op=op)
        except OperatorConversionError:
            raise
        except Exception as error:  # TVM raises many types; all mean "cannot convert"
            name, custom = self.operator_name(op)
            outputs = op.OutputsAsNumpy() if op.OutputsLength() else []
            tensor = self.subgraph.Tensors(int(outputs[0])).Name().decode() if len(outputs) else ""
            raise OperatorConversionError(
                f"{name} (custom)" if custom else name, tensor, f"{type(error).__name__}: {error}"
            ) from error

    # -- what this converter supports -------------------------------------------------

    def operator_name(self, op) -> tuple[str, bool]:
        """An operator's builtin name, or its custom code and True for a custom one."""
        code = self.model.OperatorCodes(op.OpcodeIndex())
        builtin = max(code.DeprecatedBuiltinCode(), code.BuiltinCode())
        if builtin == _CUSTOM:
            return (code.CustomCode() or b"").decode(), True
        return self.builtin_op_code.get(builtin, f"BUILTIN_{builtin}"), False

    def unsupported_operators(self) -> dict[str, tuple[int, str]]:
        """Operators of any subgraph this converter has no conversion for: label -> (count,
        output tensor name of the first node using it). Custom ones are labelled
        ``"<code> (custom)"``."""
        found: dict[str, tuple[int, str]] = {}
        for index in range(self.model.SubgraphsLength()):
            subgraph = self.model.Subgraphs(index)
            for position in range(subgraph.OperatorsLength()):
                op = subgraph.Operators(position)
                name, custom = self.operator_name(op)
                if name in (self.custom_converters if custom else self.convert_map):
                    continue
                label = f"{name} (custom)" if custom else name
                outputs = op.OutputsAsNumpy() if op.OutputsLength() else []
                first = (
                    subgraph.Tensors(int(outputs[0])).Name().decode()
                    if len(outputs)
                    else f"operator #{position}"
                )
                count, first = found.get(label, (0, first))
                found[label] = (count + 1, first)
        return found

    # -- tensors: stored buffers, sparse constants, DENSIFY ---------------------------

    def get_tensors(self, tensors_idx_list):
        wrappers = super().get_tensors(tensors_idx_list)
        for wrapper in wrappers:
            buffer = wrapper.buffer
            if isinstance(buffer, tflite.Buffer) and buffer.Offset() > 1:
                start = buffer.Offset()
                wrapper.buffer = StoredBuffer(self.flatbuffer[start : start + buffer.Size()])
        return wrappers

    def get_tensor_value(self, tensor_wrapper, is_sparse=False):
        # TVM's convert_dequantize reads a float16 input with get_tensor_value, not
        # get_tensor_value_or_prefetched, so a DENSIFY output (which has no buffer: TVM's
        # convert_densify prefetches it) would fail with "a bytes-like object is required".
        if self.is_prefetched(tensor_wrapper.tensor_idx):
            return self.get_prefetched_node(tensor_wrapper.tensor_idx)
        if tensor_wrapper.tensor.Sparsity() is not None and not is_sparse:
            return densify(tensor_wrapper.tensor, super().get_tensor_value(tensor_wrapper, True))
        return super().get_tensor_value(tensor_wrapper, is_sparse)

    def convert_densify(self, op):
        """DENSIFY of a sparse constant: its dense value, folded at import."""
        (sparse,) = self.get_input_tensors(op)
        (output,) = self.get_output_tensors(op)
        self.set_prefetched_node(output.tensor_idx, self.get_tensor_value(sparse))

    def convert_expand_dims(self, op):
        """EXPAND_DIMS (TVM's conversion passes Relax's ``expand_dims`` an argument it
        does not take)."""
        data, axis = self.get_input_tensors(op)
        axis = int(np.asarray(self.get_tensor_value(axis)).flat[0])
        return relax.op.expand_dims(self.get_tensor_expr(data), axis)

    def convert_gelu(self, op):
        """GELU, in its tanh form when the operator says ``approximate``."""
        options = GeluOptions()
        if op.BuiltinOptions() is not None:
            options.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
        if self.is_quantized(op) or op.BuiltinOptions() is None or not options.Approximate():
            return super().convert_gelu(op)
        (data,) = self.get_input_tensors(op)
        x = self.get_tensor_expr(data)
        dtype = self.get_tensor_type_str(data.tensor.Type())

        def const(value):
            return relax.const(value, dtype)

        cubic = relax.op.multiply(const(0.044715), relax.op.multiply(x, relax.op.multiply(x, x)))
        inner = relax.op.multiply(const(float(np.sqrt(2.0 / np.pi))), relax.op.add(x, cubic))
        half = relax.op.multiply(const(0.5), x)
        return relax.op.multiply(half, relax.op.add(const(1.0), relax.op.tanh(inner)))

    def convert_space_to_batch_nd(self, op):
        data, block, paddings = self.get_input_tensors(op)
        expr, shape = self._static_input(data)
        return space_batch.space_to_batch(
            expr,
            shape,
            to_int_list(self.get_tensor_value(block)),
            self.get_tensor_value(paddings).tolist(),
        )

    def convert_batch_to_space_nd(self, op):
        data, block, crops = self.get_input_tensors(op)
        expr, shape = self._static_input(data)
        return space_batch.batch_to_space(
            expr,
            shape,
            to_int_list(self.get_tensor_value(block)),
            self.get_tensor_value(crops).tolist(),
        )

    # -- custom operators --------------------------------------------------------------

    def convert_custom(self, op):
        name, _ = self.operator_name(op)
        if name not in self.custom_converters:
            raise tvm.error.OpNotImplemented(f"custom operator {name!r}")
        return self.custom_converters[name](op=op)

    def _custom_inputs(self, op):
        """The input expressions and the custom options (those stored after the
        flatbuffer too) of a custom operator."""
        if op.LargeCustomOptionsOffset() > 1:
            start = op.LargeCustomOptionsOffset()
            options = self.flatbuffer[start : start + op.LargeCustomOptionsSize()]
        else:
            options = op.CustomOptionsAsNumpy().tobytes() if op.CustomOptionsLength() else b""
        exprs = [self.bb.normalize(self.get_tensor_expr(t)) for t in self.get_input_tensors(op)]
        return exprs, options

    def convert_transpose_conv_bias(self, op):
        (data, weights, bias), options = self._custom_inputs(op)
        same, stride = mediapipe.transpose_conv_params(options)
        return mediapipe.transpose_conv_bias(
            data, weights, bias, static_shape(data)[1:3], static_shape(weights)[1:3], same, stride
        )

    def convert_max_pool_with_argmax(self, op):
        (data,), options = self._custom_inputs(op)
        params = mediapipe.pool_params(options, "MaxPoolingWithArgmax2D")
        pooled, indices = mediapipe.max_pool_with_argmax(data, static_shape(data), params)
        return relax.Tuple(
            [self.convert_fused_activation_function(pooled, params.activation), indices]
        )

    def convert_max_unpooling(self, op):
        (data, indices), options = self._custom_inputs(op)
        params = mediapipe.pool_params(options, "MaxUnpooling2D")
        return mediapipe.max_unpooling(data, indices, static_shape(data), params)

    # -- transposed convolutions -------------------------------------------------------

    def transpose_conv_output_shape(self, op, data_shape, kernel, strides, same):
        """The output shape a transposed convolution is given: its first input when it is
        a constant, else what :func:`.tflite_transpose_conv.output_shape` derives from
        the output tensor's sizes and ``data_shape``, the input's (fixed) shape."""
        shape_tensor, weights = self.get_input_tensors(op)[:2]
        if self.is_prefetched(shape_tensor.tensor_idx) or shape_tensor.buffer.DataLength():
            return tuple(int(size) for size in self.get_tensor_value(shape_tensor))
        output = self.get_output_tensors(op)[0].tensor
        known = [
            int(size)
            for size in (
                output.ShapeSignatureAsNumpy()
                if output.ShapeSignatureLength()
                else output.ShapeAsNumpy()
            )
        ]
        weight_shape = to_int_list(self.get_tensor_shape(weights))
        channels = weight_shape[0] if len(data_shape) == 4 else weight_shape[-2]  # OHWI, DHWOI
        return transpose_conv.output_shape(
            [-1, *known[1:]], data_shape[0], data_shape[1:-1], kernel, strides, same, channels
        )

    def _static_input(self, tensor):
        """A tensor's expression and its shape, which must be static."""
        expr = self.bb.normalize(self.get_tensor_expr(tensor))
        shape = static_shape(expr)
        if shape is None:
            raise tvm.error.OpAttributeInvalid(
                f"the shape of {tensor.tensor.Name().decode()} is not static"
            )
        return expr, shape

    def _bias_and_activation(self, op, out, activation):
        inputs = self.get_input_tensors(op)
        if len(inputs) > 3 and inputs[3].tensor_idx >= 0:
            out = relax.op.add(out, self.get_tensor_expr(inputs[3]))
        return self.convert_fused_activation_function(out, activation)

    def convert_transpose_conv(self, op):
        """TRANSPOSE_CONV at the output shape it is given (TVM's conversion, given that
        shape as a constant, for quantized ones)."""
        shape_tensor, weights, data = self.get_input_tensors(op)[:3]
        options = TransposeConvOptions()
        options.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
        data_expr, data_shape = self._static_input(data)
        kernel = tuple(to_int_list(self.get_tensor_shape(weights))[1:3])
        strides = (options.StrideH(), options.StrideW())
        same = options.Padding() == _SAME
        out_shape = self.transpose_conv_output_shape(op, data_shape, kernel, strides, same)
        if data.qnn_params:
            self.set_prefetched_node(shape_tensor.tensor_idx, np.asarray(out_shape, "int32"))
            return super().convert_transpose_conv(op)
        out = transpose_conv.transpose_conv2d(
            data_expr,
            self.get_tensor_expr(weights),
            data_shape[1:3],
            kernel,
            strides,
            same,
            out_shape,
            self.get_tensor_type_str(self.get_output_tensors(op)[0].tensor.Type()),
        )
        return self._bias_and_activation(op, out, options.FusedActivationFunction())

    def convert_conv3d_transpose(self, op):
        """CONV_3D_TRANSPOSE at the output shape it is given, in NCDHW (TVM's conversion
        for quantized or grouped ones, which it does not support)."""
        _, weights, data = self.get_input_tensors(op)[:3]
        weight_shape = to_int_list(self.get_tensor_shape(weights))
        data_expr, data_shape = self._static_input(data)
        if data.qnn_params or data_shape[-1] != weight_shape[-1]:
            return super().convert_conv3d_transpose(op)
        options = Conv3DOptions()
        options.Init(op.BuiltinOptions().Bytes, op.BuiltinOptions().Pos)
        kernel = tuple(weight_shape[:3])
        strides = (options.StrideD(), options.StrideH(), options.StrideW())
        dilation = (options.DilationDFactor(), options.DilationHFactor(), options.DilationWFactor())
        same = options.Padding() == _SAME
        dilated = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
        out_shape = self.transpose_conv_output_shape(op, data_shape, dilated, strides, same)
        out = transpose_conv.transpose_conv3d(
            data_expr,
            self.get_tensor_expr(weights),
            data_shape[1:4],
            kernel,
            strides,
            dilation,
            same,
            out_shape,
        )
        return self._bias_and_activation(op, out, options.FusedActivationFunction())
