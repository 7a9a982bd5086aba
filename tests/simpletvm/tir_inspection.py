"""What a scheduled TIR function's loops are, for tests that check how the cores split it."""

from __future__ import annotations


def parallel_loops(func) -> list:
    """Every parallel ``For`` of ``func`` (a PrimFunc), outermost first within a nest."""
    from tvm.tirx import For, ForKind

    found, stack = [], [func.body]
    while stack:
        node = stack.pop()
        if isinstance(node, For) and int(node.kind) == int(ForKind.PARALLEL):
            found.append(node)
        for name in ("body", "block", "then_case", "else_case"):
            child = getattr(node, name, None)
            if child is not None:
                stack.append(child)
        stack.extend(getattr(node, "seq", None) or [])
    return found


def blocks_in_loops(func) -> dict[str, tuple]:
    """Per block name of ``func`` (a PrimFunc): its ``SBlockRealize`` and the ``For``
    loops around it, outermost first."""
    from tvm.s_tir import SBlockRealize
    from tvm.tirx import For

    found: dict[str, tuple] = {}
    stack = [(func.body, [])]
    while stack:
        node, loops = stack.pop()
        if isinstance(node, For):
            stack.append((node.body, [*loops, node]))
            continue
        if isinstance(node, SBlockRealize):
            found[node.block.name_hint] = (node, loops)
            stack.append((node.block.body, loops))
            continue
        for name in ("body", "then_case", "else_case"):
            child = getattr(node, name, None)
            if child is not None:
                stack.append((child, loops))
        stack.extend((child, loops) for child in getattr(node, "seq", None) or [])
    return found


def split_axes(func, block_name: str, cores: int = 4) -> set[str]:
    """The iteration variables of block ``block_name`` (or its reduction's update) that
    the first of ``cores`` cores covers only part of: what the cores split between them
    (TVM gives each core a contiguous share of a parallel loop)."""
    from tvm.ir import Range
    from tvm.sym import Analyzer
    from tvm.tirx import ForKind

    split = set()
    for name, (realize, loops) in blocks_in_loops(func).items():
        if name not in (block_name, f"{block_name}_update"):
            continue
        analyzer = Analyzer()
        for loop in loops:
            extent = int(loop.extent)
            if int(loop.kind) == int(ForKind.PARALLEL):
                extent = -(-extent // cores)
            analyzer.bind(loop.loop_var, Range.from_min_extent(int(loop.min), extent))
        for value, iv in zip(realize.iter_values, realize.block.iter_vars):
            bound = analyzer.const_int_bound(value)
            if bound.max_value - bound.min_value + 1 < int(iv.dom.extent):
                split.add(str(iv.var))
    return split
