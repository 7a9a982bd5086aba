"""Candidates whose loops skip part of a block's iterations are rejected.

MultiLevelTiling computes a convolution's epilogue per output tile: it moves the
consumer under the tile loop (``reverse-compute-at``), and TVM sizes the moved block's
loops by the region of the tile it reads. A consumer whose output is larger than what it
reads, a pad after the epilogue (``conv -> hard-swish -> pad`` ahead of a stride-2
depthwise convolution, as in MobileNetV3), then runs only the iterations that read the
tile: its border is never written. The kernel's output keeps whatever its memory held,
which TVM's pooled allocator hands from one kernel, or one executable, to the next, so
the model's answer depends on what ran before it in the process. Such a candidate is
not a schedule of its PrimFunc: :class:`EveryIteration` rejects it (the search samples
another; a default schedule takes the next design space).
"""

from __future__ import annotations

from tvm.ir import Range
from tvm.ir.utils import derived_object
from tvm.s_tir import SBlockRealize
from tvm.s_tir.meta_schedule.postproc import PyPostproc
from tvm.sym import Analyzer
from tvm.tirx import For, IntImm


def uncovered_blocks(func) -> list[str]:
    """The blocks of ``func`` (a PrimFunc) one of whose iteration variables the loops
    around the block never take to the first or the last value of its domain. The
    bounds are TVM's (wider than the values taken, never narrower), so a block named
    here misses iterations; a block bound to values TVM cannot bound is not named."""
    found: list[str] = []
    stack = [(func.body, ())]
    while stack:
        node, loops = stack.pop()
        if isinstance(node, For):
            stack.append((node.body, (*loops, node)))
            continue
        if isinstance(node, SBlockRealize):
            if _misses_iterations(node, loops):
                found.append(node.block.name_hint)
            stack.append((node.block.body, loops))
            continue
        for name in ("body", "then_case", "else_case"):
            child = getattr(node, name, None)
            if child is not None:
                stack.append((child, loops))
        stack.extend((child, loops) for child in getattr(node, "seq", None) or [])
    return found


def _misses_iterations(realize, loops) -> bool:
    analyzer = Analyzer()
    for loop in loops:
        analyzer.bind(loop.loop_var, Range.from_min_extent(loop.min, loop.extent))
    for value, iter_var in zip(realize.iter_values, realize.block.iter_vars):
        first, extent = iter_var.dom.min, iter_var.dom.extent
        if not (isinstance(first, IntImm) and isinstance(extent, IntImm)):
            continue
        bound = analyzer.const_int_bound(value)
        if bound.min_value > first.value or bound.max_value < first.value + extent.value - 1:
            return True
    return False


@derived_object
class EveryIteration(PyPostproc):
    """Rejects a candidate one of whose blocks misses iterations
    (:func:`uncovered_blocks`)."""

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, sch) -> bool:
        return not any(uncovered_blocks(sch.mod[gvar]) for gvar in sch.mod.get_global_vars())

    def clone(self):
        return EveryIteration()
