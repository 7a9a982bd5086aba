"""The operator converter SimpleTVM gives TVM's TFLite frontend (its ``op_converter`` hook).

It reads TFLite models as converters and vendors ship them, where TVM's own
``OperatorConverter`` does not:

- buffers stored after the flatbuffer (``Buffer.offset``/``size``, for models over 2 GB
  or written with that option), which TVM reads as empty;
- sparse constants (``Tensor.sparsity``), decoded to dense at import whichever operator
  reads them (DENSIFY, DEQUANTIZE or a kernel);
- MediaPipe's custom operators (:mod:`.tflite_mediapipe`), through the frontend's
  ``allow_custom_ops`` switch and a ``CUSTOM`` entry in its conversion table.

Imported lazily: it subclasses a TVM class.
"""

from __future__ import annotations

import numpy as np
import tflite
import tvm
from tvm import relax
from tvm.relax.frontend.tflite.tflite_frontend import OperatorConverter

from simpletvm.models import tflite_mediapipe as mediapipe
from simpletvm.models.tflite_sparse import densify
from simpletvm.relax_ir import static_shape

_CUSTOM = 32  # tflite.BuiltinOperator.CUSTOM
_DETECTION_POSTPROCESS = "TFLite_Detection_PostProcess"  # custom code TVM converts itself


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
