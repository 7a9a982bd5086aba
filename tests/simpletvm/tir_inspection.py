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
