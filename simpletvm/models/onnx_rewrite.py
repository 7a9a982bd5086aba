"""Exact, layout-neutral rewrites of an ``onnx.ModelProto`` before TVM's ONNX frontend.

TVM 0.27's frontend imports some ONNX ops as ``call_tir`` of a TOPI kernel instead of a
Relax op, and Relax passes that reason about operators (``ConvertLayout`` above all)
cannot see through a ``call_tir``: every such node pins the NCHW layout around it and
costs a transpose pair after a conversion to NHWC. This module rewrites those nodes into
ONNX ops the frontend imports as Relax ops, computing exactly the same values:

- ``Clip`` with constant bounds (attributes before opset 11, initializers or ``Constant``
  nodes after) -> ``Relu`` for a lower bound of 0, ``Max``/``Min`` with scalar constants
  otherwise (TVM imports Clip as ``call_tir(topi.maximum)``/``call_tir(topi.minimum)``).
- ``Pad`` (mode constant, value 0, constant non-negative pads on spatial axes only)
  whose every consumer is a ``Conv`` -> folded into the Convs' ``pads`` (TVM imports Pad
  as ``call_tir(topi.nn.pad)``); also into a ``MaxPool`` whose input is provably never
  negative (a ReLU's output), where padding with 0 or with -inf gives the same maximum.
- ``Conv`` with ``auto_pad`` SAME_UPPER/SAME_LOWER and a known input shape -> explicit
  ``pads`` (TVM imports the implicit padding as ``call_tir(topi.nn.pad)`` too).
- ``Reshape`` at the end of a chain of shape-only ops that leaves the shape as it was ->
  ``Identity``; one that only moves axes of extent 1 (tf2onnx writes NHWC<->NCHW
  transposes of 1x1 feature maps as reshapes) -> ``Transpose``, which a layout
  conversion cancels. Nodes left unused are removed.

TVM's frontend turns a two-input ``Max``/``Min`` into broadcast_to + stack + max; see
:func:`simpletvm.models.onnx.relax_from_onnx` for the Relax clean-up that makes it one
``maximum``/``minimum``.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import numpy as np

from simpletvm.models.onnx_graph import (
    GraphLookup,
    attributes,
    default_opset,
    onnx_type,
    set_attribute,
)

_FLOAT_TYPES = {1, 10, 11, 16}  # float, float16, double, bfloat16 (onnx.TensorProto)


def rewrite_for_import(model) -> tuple[Any, dict[str, int]]:
    """A rewritten copy of ``model`` (the argument is left unchanged) and how many nodes
    each rewrite changed: ``{"clip": ..., "pad": ..., "auto_pad": ..., "reshape": ...,
    "removed": nodes left unused}``."""
    import onnx

    out = onnx.ModelProto()
    out.CopyFrom(model)
    rewriter = _Rewriter(out)
    stats = rewriter.run()
    return out, stats


# ---- internals ------------------------------------------------------------------------
class _Rewriter:
    def __init__(self, model):
        self.graph = model.graph
        self.lookup = GraphLookup(model)
        self.opset = default_opset(model)
        self.stats: Counter = Counter()
        self.bound_constants: dict[tuple, str] = {}
        self.orphans: set[str] = set()  # constants whose users may all be gone

    def run(self) -> dict[str, int]:
        nodes: list = []
        producers: dict = {}
        for node in self.graph.node:
            if node.domain not in ("", "ai.onnx"):
                new = [node]
            elif node.op_type == "Clip":
                new = self._clip(node)
            elif node.op_type == "Reshape":
                new = [self._reshape(node, producers)]
            else:
                new = [node]
            for item in new:
                producers.update((name, item) for name in item.output)
            nodes.extend(new)
        nodes = self._fold_pads(nodes)
        for node in nodes:
            if node.op_type == "Conv" and node.domain in ("", "ai.onnx"):
                self._explicit_same_pads(node)
        nodes = self._dead_code(nodes)
        del self.graph.node[:]
        self.graph.node.extend(nodes)
        self.lookup.drop_unused(self.orphans)
        return {key: self.stats[key] for key in ("clip", "pad", "auto_pad", "reshape", "removed")}

    # -- Clip -> Relu / Max / Min --------------------------------------------------------
    def _clip(self, node) -> list:
        import onnx

        bounds = self._clip_bounds(node)
        if bounds is None:
            return [node]
        low, high, dtype = bounds
        if dtype not in _FLOAT_TYPES:
            return [node]
        low = None if low is None or math.isnan(low) or low == -math.inf else low
        high = None if high is None or math.isnan(high) or high == math.inf else high
        x, y = node.input[0], node.output[0]
        if (low is not None and low != 0.0 or high is not None) and self.opset < 8:
            return [node]  # Max and Min broadcast from opset 8 on
        new: list = []
        name = node.name or y
        if low is not None or high is not None:
            last = x
            if low is not None:
                out = y if high is None else self.lookup.fresh(f"{y}__clip_low")
                if low == 0.0:
                    new.append(onnx.helper.make_node("Relu", [last], [out], name=f"{name}/relu"))
                else:
                    new.append(
                        onnx.helper.make_node(
                            "Max", [last, self._scalar(low, dtype)], [out], name=f"{name}/max"
                        )
                    )
                last = out
            if high is not None:
                new.append(
                    onnx.helper.make_node(
                        "Min", [last, self._scalar(high, dtype)], [y], name=f"{name}/min"
                    )
                )
        else:
            new.append(onnx.helper.make_node("Identity", [x], [y], name=f"{name}/identity"))
        self.orphans.update(bound for bound in node.input[1:] if bound)
        self.stats["clip"] += 1
        return new

    def _clip_bounds(self, node) -> tuple[float | None, float | None, int | None] | None:
        """(low, high, element type) when the bounds are constants, else None; the type
        is None when neither a bound nor shape inference tells it."""
        if self.opset < 11:
            attrs = attributes(node)
            return attrs.get("min"), attrs.get("max"), self.lookup.elem_type(node.input[0])
        values: list[float | None] = []
        dtype = None
        for name in (list(node.input[1:]) + ["", ""])[:2]:
            if not name:
                values.append(None)
                continue
            array = self.lookup.constant(name)
            if array is None or array.size != 1:
                return None
            values.append(float(array.reshape(())))
            dtype = onnx_type(array.dtype)
        return values[0], values[1], dtype or self.lookup.elem_type(node.input[0])

    def _scalar(self, value: float, elem_type: int) -> str:
        """The name of a scalar initializer holding ``value`` (shared by equal bounds)."""
        from onnx import helper, numpy_helper

        key = (value, elem_type)
        if key not in self.bound_constants:
            name = self.lookup.fresh(f"clip_bound_{value:g}".replace("-", "m").replace(".", "_"))
            np_type = helper.tensor_dtype_to_np_dtype(elem_type)
            self.graph.initializer.append(numpy_helper.from_array(np.array(value, np_type), name))
            self.bound_constants[key] = name
        return self.bound_constants[key]

    # -- Pad folded into Conv ---------------------------------------------------------
    def _fold_pads(self, nodes: list) -> list:
        consumers: dict[str, list] = {}
        producers: dict = {}
        for node in nodes:
            for name in node.input:
                consumers.setdefault(name, []).append(node)
            producers.update((name, node) for name in node.output)
        kept = []
        for node in nodes:
            if node.op_type == "Pad" and node.domain in ("", "ai.onnx"):
                spatial = self._foldable_pad(node, consumers.get(node.output[0], []), producers)
                if spatial is not None:
                    for user in consumers[node.output[0]]:
                        _add_pads(user, spatial)
                        user.input[0] = node.input[0]
                    self.orphans.update(name for name in node.input[1:] if name)
                    self.stats["pad"] += 1
                    continue
            kept.append(node)
        return kept

    def _foldable_pad(self, node, users: list, producers) -> tuple[list[int], list[int]] | None:
        """(begin, end) spatial pads when ``node`` may be folded into ``users``, else None."""
        y = node.output[0]
        if not users or y in self.lookup.outputs or y in self.lookup.subgraph_uses:
            return None
        attrs = attributes(node)
        mode = attrs.get("mode", b"constant")
        if (mode.decode() if isinstance(mode, bytes) else mode) != "constant":
            return None
        if self.opset < 11:
            pads = attrs.get("pads", attrs.get("paddings"))
            value = attrs.get("value", 0.0)
            axes = None
        else:
            inputs = list(node.input) + ["", "", ""]
            pads_array = self.lookup.constant(inputs[1]) if inputs[1] else None
            if pads_array is None:
                return None
            pads = [int(v) for v in pads_array.reshape(-1)]
            value = 0.0
            if inputs[2]:
                value_array = self.lookup.constant(inputs[2])
                if value_array is None or value_array.size != 1:
                    return None
                value = float(value_array.reshape(()))
            axes = None
            if inputs[3]:
                axes_array = self.lookup.constant(inputs[3])
                if axes_array is None:
                    return None
                axes = [int(v) for v in axes_array.reshape(-1)]
        if pads is None or value != 0.0:
            return None
        rank = len(pads) // 2
        if axes is not None:
            rank = self.lookup.rank(node.input[0])
            if rank is None or len(axes) != len(pads) // 2:
                return None
            full = [0] * (2 * rank)
            for i, axis in enumerate(axes):
                axis = axis + rank if axis < 0 else axis
                full[axis], full[rank + axis] = pads[i], pads[len(axes) + i]
            pads = full
        begin, end = list(pads[:rank]), list(pads[rank:])
        if rank < 3 or any(p < 0 for p in pads) or any(begin[:2]) or any(end[:2]):
            return None
        for user in users:
            if user.op_type not in ("Conv", "MaxPool") or user.domain not in ("", "ai.onnx"):
                return None
            if list(user.input).count(y) != 1 or user.input[0] != y:
                return None
            attrs = attributes(user)
            auto_pad = attrs.get("auto_pad", b"NOTSET")
            if (auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad) != "NOTSET":
                return None
            if user.op_type == "MaxPool" and not self._pool_takes_zero_pads(
                user, attrs, begin[2:], end[2:], node.input[0], producers
            ):
                return None
        return begin[2:], end[2:]

    def _pool_takes_zero_pads(self, pool, attrs, begin, end, x: str, producers) -> bool:
        """Whether ``MaxPool(Pad(x, 0))`` equals MaxPool with those pads (which it fills
        with -inf): when ``x`` is never negative and no window lies wholly in the padding
        (Keras' ResNet50 pads its stem's ReLU output so before the max pool)."""
        kernel = attrs.get("kernel_shape")
        if len(pool.output) != 1 or attrs.get("ceil_mode", 0) or kernel is None:
            return False
        pads = [p + q for p, q in zip(attrs.get("pads", [0] * 2 * len(kernel)), begin + end)]
        dilations = attrs.get("dilations", [1] * len(kernel))
        extent = [(k - 1) * d + 1 for k, d in zip(kernel, dilations)]
        if any(p >= e for p, e in zip(pads, extent + extent)):
            return False
        return self._non_negative(x, producers)

    def _non_negative(self, name: str, producers, depth: int = 0) -> bool:
        """Whether tensor ``name`` is provably >= 0 everywhere (a conservative answer)."""
        array = self.lookup.constant(name)
        if array is not None:
            return bool(np.all(array >= 0))
        node = producers.get(name)
        if node is None or depth > 16 or node.domain not in ("", "ai.onnx"):
            return False
        if node.op_type in ("Relu", "Sigmoid", "Abs", "Exp", "Softplus"):
            return True
        inputs = [i for i in node.input if i]
        if node.op_type == "Min":
            return all(self._non_negative(i, producers, depth + 1) for i in inputs)
        if node.op_type == "Max":
            return any(self._non_negative(i, producers, depth + 1) for i in inputs)
        if node.op_type in (
            "Identity",
            "MaxPool",
            "Reshape",
            "Flatten",
            "Squeeze",
            "Unsqueeze",
            "Transpose",
        ):
            return self._non_negative(node.input[0], producers, depth + 1)
        return False

    # -- Conv auto_pad SAME -> explicit pads --------------------------------------------
    def _explicit_same_pads(self, conv) -> None:
        attrs = attributes(conv)
        auto_pad = attrs.get("auto_pad", b"NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
        if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
            return
        shape = self.lookup.shape(conv.input[0])
        kernel = attrs.get("kernel_shape")
        if kernel is None:
            weight = self.lookup.shape(conv.input[1])
            kernel = None if weight is None else weight[2:]
        if (
            shape is None
            or kernel is None
            or any(d is None for d in list(shape[2:]) + list(kernel))
        ):
            return
        spatial = len(shape) - 2
        strides = attrs.get("strides", [1] * spatial)
        dilations = attrs.get("dilations", [1] * spatial)
        begin, end = [], []
        for size, k, s, d in zip(shape[2:], kernel, strides, dilations):
            total = max((-(-size // s) - 1) * s + (k - 1) * d + 1 - size, 0)
            small, large = total // 2, total - total // 2
            begin.append(small if auto_pad == "SAME_UPPER" else large)
            end.append(large if auto_pad == "SAME_UPPER" else small)
        set_attribute(conv, "auto_pad", "NOTSET")
        set_attribute(conv, "pads", begin + end)
        self.stats["auto_pad"] += 1

    # -- shape-only chains ending in a Reshape -> Identity / Transpose ------------------
    def _reshape(self, node, producers: dict):
        """A Reshape reads its input in row-major order, so it may read from the start of
        a chain of order-keeping ops (Reshape, Flatten, Squeeze, Unsqueeze, Identity,
        Transpose moving only axes of extent 1) instead. When that start has the same
        shape as the result the Reshape is an Identity; when it has the same non-1 extents
        in the same order, a Transpose (tf2onnx writes NHWC<->NCHW transposes of 1x1
        feature maps as reshapes)."""
        import onnx

        if len(node.input) < 2 or attributes(node).get("allowzero", 0):
            return node
        after = self.lookup.shape(node.output[0])
        source = node.input[0]
        while source in producers and self._keeps_order(producers[source]):
            source = producers[source].input[0]
        before = self.lookup.shape(source)
        if before is None or after is None or None in before or None in after:
            return node
        if before == after:
            replacement = onnx.helper.make_node(
                "Identity",
                [source],
                list(node.output),
                name=(node.name or node.output[0]) + "/identity",
            )
        else:
            perm = _size_one_permutation(list(before), list(after))
            if perm is None:
                return node
            replacement = onnx.helper.make_node(
                "Transpose",
                [source],
                list(node.output),
                name=(node.name or node.output[0]) + "/transpose",
                perm=perm,
            )
        self.orphans.update(name for name in node.input[1:] if name)
        self.stats["reshape"] += 1
        return replacement

    def _keeps_order(self, node) -> bool:
        """Whether ``node`` only reshapes its first input, keeping the element order."""
        if node.domain not in ("", "ai.onnx") or len(node.output) != 1:
            return False
        if node.op_type in ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"):
            return True
        if node.op_type == "Transpose":
            before, after = self.lookup.shape(node.input[0]), self.lookup.shape(node.output[0])
            if before is None or after is None or None in before or None in after:
                return False
            perm = attributes(node).get("perm", list(range(len(before)))[::-1])
            moved = [i for i in perm if before[i] != 1]
            return moved == sorted(moved)
        return False

    def _dead_code(self, nodes: list) -> list:
        """Drop nodes none of whose outputs is used (ONNX ops have no side effects)."""
        while True:
            used = {name for node in nodes for name in node.input}
            used |= self.lookup.outputs | self.lookup.subgraph_uses
            live = [node for node in nodes if any(name in used for name in node.output if name)]
            if len(live) == len(nodes):
                return nodes
            for node in nodes:
                if not any(name in used for name in node.output if name):
                    self.orphans.update(name for name in node.input if name)
                    self.stats["removed"] += 1
            nodes = live


def _add_pads(node, spatial: tuple[list[int], list[int]]) -> None:
    """Add (begin, end) spatial padding to a Conv's or pool's ``pads``."""
    begin, end = spatial
    n = len(begin)
    pads = list(attributes(node).get("pads", [0] * (2 * n)))
    set_attribute(node, "pads", [p + q for p, q in zip(pads, begin + end)])


def _size_one_permutation(before: list[int], after: list[int]) -> list[int] | None:
    """The permutation ``perm`` with ``after == [before[p] for p in perm]`` when a reshape
    from ``before`` to ``after`` only moves axes of extent 1, else None."""
    if len(before) != len(after) or sorted(before) != sorted(after):
        return None
    big_before = [i for i, d in enumerate(before) if d != 1]
    big_after = [i for i, d in enumerate(after) if d != 1]
    if [before[i] for i in big_before] != [after[i] for i in big_after]:
        return None  # the axes of extent > 1 would change order: not a transpose
    ones_before = iter(i for i, d in enumerate(before) if d == 1)
    sources = iter(big_before)
    return [next(sources) if d != 1 else next(ones_before) for d in after]
