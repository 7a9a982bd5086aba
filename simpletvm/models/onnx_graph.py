"""Lookups over an ``onnx.ModelProto``'s graph for the rewrites before import
(:mod:`simpletvm.models.onnx_rewrite`): constants, inferred shapes and element types,
names read by outputs and subgraphs, fresh names, node attributes."""

from __future__ import annotations

from typing import Any

import numpy as np


class GraphLookup:
    """What a graph's rewrites look up: its constants (initializers that are not inputs,
    ``Constant`` nodes), the shapes and element types shape inference gives, the names
    its outputs and subgraphs read, and names not taken yet."""

    def __init__(self, model):
        self.graph = model.graph
        graph_inputs = {vi.name for vi in self.graph.input}
        # an initializer that is also a graph input is only a default: not a constant
        self.initializers = {
            init.name: init for init in self.graph.initializer if init.name not in graph_inputs
        }
        self.constant_nodes = {
            node.output[0]: node
            for node in self.graph.node
            if node.op_type == "Constant" and node.domain in ("", "ai.onnx")
        }
        self.outputs = {vi.name for vi in self.graph.output}
        self.subgraph_uses = subgraph_inputs(self.graph)
        self.value_info = inferred_value_info(model)
        self.used_names = all_names(self.graph)

    def constant(self, name: str) -> np.ndarray | None:
        from onnx import numpy_helper

        if name in self.initializers:
            return numpy_helper.to_array(self.initializers[name])
        node = self.constant_nodes.get(name)
        if node is None:
            return None
        for attr in node.attribute:
            if attr.name == "value":
                return numpy_helper.to_array(attr.t)
            if attr.name == "value_float":
                return np.array(attr.f, np.float32)
            if attr.name == "value_floats":
                return np.array(list(attr.floats), np.float32)
            if attr.name == "value_int":
                return np.array(attr.i, np.int64)
            if attr.name == "value_ints":
                return np.array(list(attr.ints), np.int64)
        return None

    def shape(self, name: str) -> tuple[int | None, ...] | None:
        if name in self.initializers:
            return tuple(self.initializers[name].dims)
        vi = self.value_info.get(name)
        if vi is None or not vi.type.tensor_type.HasField("shape"):
            return None
        return tuple(
            d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None
            for d in vi.type.tensor_type.shape.dim
        )

    def rank(self, name: str) -> int | None:
        shape = self.shape(name)
        return None if shape is None else len(shape)

    def elem_type(self, name: str) -> int | None:
        if name in self.initializers:
            return self.initializers[name].data_type
        vi = self.value_info.get(name)
        return vi.type.tensor_type.elem_type if vi is not None else None

    def fresh(self, base: str) -> str:
        name, i = base, 0
        while name in self.used_names:
            i += 1
            name = f"{base}_{i}"
        self.used_names.add(name)
        return name

    def drop_unused(self, orphans: set[str]) -> None:
        """Remove the constants (initializers, Constant nodes) among ``orphans`` that
        nothing uses any more, and the value infos of names no longer produced."""
        used = {name for node in self.graph.node for name in node.input} | self.subgraph_uses
        used |= self.outputs | {vi.name for vi in self.graph.input}
        dead = {name for name in orphans if name not in used}
        keep = [init for init in self.graph.initializer if init.name not in dead]
        del self.graph.initializer[:]
        self.graph.initializer.extend(keep)
        keep_nodes = [
            n for n in self.graph.node if not (n.op_type == "Constant" and n.output[0] in dead)
        ]
        del self.graph.node[:]
        self.graph.node.extend(keep_nodes)
        produced = {name for node in self.graph.node for name in node.output}
        produced |= {vi.name for vi in self.graph.input} | {i.name for i in self.graph.initializer}
        keep_info = [vi for vi in self.graph.value_info if vi.name in produced]
        del self.graph.value_info[:]
        self.graph.value_info.extend(keep_info)


def default_opset(model) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            return int(entry.version)
    return 1


def attributes(node) -> dict[str, Any]:
    from onnx import helper

    return {attr.name: helper.get_attribute_value(attr) for attr in node.attribute}


def set_attribute(node, name: str, value) -> None:
    from onnx import helper

    kept = [attr for attr in node.attribute if attr.name != name]
    del node.attribute[:]
    node.attribute.extend(kept)
    node.attribute.append(helper.make_attribute(name, value))


def onnx_type(dtype) -> int:
    from onnx import helper

    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def inferred_value_info(model) -> dict[str, Any]:
    import onnx

    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:  # noqa: BLE001 - without shapes the rewrites that need them skip
        inferred = model
    graph = inferred.graph
    return {vi.name: vi for vi in list(graph.value_info) + list(graph.input) + list(graph.output)}


def subgraph_inputs(graph) -> set[str]:
    """Names read inside subgraphs (If/Loop/Scan bodies) of ``graph``'s nodes."""
    from onnx import AttributeProto

    names: set[str] = set()
    for node in graph.node:
        for attr in node.attribute:
            bodies = (
                [attr.g]
                if attr.type == AttributeProto.GRAPH
                else list(attr.graphs)
                if attr.type == AttributeProto.GRAPHS
                else []
            )
            for body in bodies:
                names |= {name for inner in body.node for name in inner.input}
                names |= subgraph_inputs(body)
    return names


def all_names(graph) -> set[str]:
    names = {vi.name for vi in list(graph.input) + list(graph.output) + list(graph.value_info)}
    names |= {init.name for init in graph.initializer}
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
    return names
