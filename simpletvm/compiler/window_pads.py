"""Padding read in place by convolutions that sum over a window only.

TVM lowers a padded convolution to two loop nests: ``pad_temp``, a zero-bordered copy of
the whole input, then the convolution reading the copy. MetaSchedule's CPU rules never
inline the copy (they refuse producers with a conditional), so a tuned kernel or a
default schedule writes and reads a second input-sized buffer every call. For a
convolution summing over channels that copy is cheap against its arithmetic; for a
depthwise one (a 3x3 or 5x5 window, no channel sum) it is as much memory traffic as the
convolution itself, and inside a model, where the copy's buffer is cold, MobileNetV2's
112x112 and 56x56 depthwise layers ran 2x slower than timed alone (up to 5x in a slow
state of a 2-core host; BENCHMARKS.md). Here such a pad is inlined into its convolution
before tasks are extracted: the convolution reads the input itself and reads zero
outside it, in the tuning space and in the default schedules alike.
"""

from __future__ import annotations

import math

from simpletvm.compiler.core_split import COMM_REDUCE
from simpletvm.compiler.lowering import is_scheduled

# a convolution whose reduction (window x input channels) is at most this many terms
# per output reads each input element about as often as the pad copy writes it; 49: a
# 7x7 window of one channel, a 3x3 window of 5
MAX_WINDOW_TERMS = 49


def inline_window_pads(mod):
    """``mod`` with the pad of every window-only convolution inlined into it (PrimFuncs
    not yet scheduled); returns ``(module, number of pads inlined)``."""
    import tvm

    functions = dict(mod.functions_items())
    inlined = 0
    for gvar, func in mod.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc) or is_scheduled(func):
            continue
        new, count = _inline_in(func)
        if count:
            functions[gvar] = new
            inlined += count
    if not inlined:
        return mod, 0
    return tvm.IRModule(functions, attrs=mod.attrs, global_infos=mod.global_infos), inlined


def inline_window_pads_pass():
    """:func:`inline_window_pads` as a module pass."""
    import tvm

    @tvm.transform.module_pass(opt_level=0, name="InlineWindowPads")
    def inline(mod, _context):
        return inline_window_pads(mod)[0]

    return inline


def _inline_in(func):
    """The PrimFunc with its window-only convolutions' pads inlined, and how many."""
    from tvm import s_tir

    sch = s_tir.Schedule(func, debug_mask=0)
    count = 0
    try:
        root = sch.get_sblock("root", func_name="main")
    except Exception:  # noqa: BLE001 - a PrimFunc without a root block: nothing to do
        return func, 0
    for block in sch.get_child_blocks(root):
        if not sch.get(block).name_hint.startswith("pad"):
            continue
        consumers = sch.get_consumers(block)
        if len(consumers) != 1 or not _window_only_convolution(sch.get(consumers[0])):
            continue
        try:
            sch.compute_inline(block)
        except Exception:  # noqa: BLE001 - a pad that cannot be inlined stays a copy
            continue
        count += 1
    if not count:
        return func, 0
    return sch.mod["main"].with_attrs(func.attrs) if func.attrs else sch.mod["main"], count


def _window_only_convolution(block) -> bool:
    """A convolution whose terms per output are few: a window, not a channel sum. (A
    pooling window keeps its pad: with the pad inlined, its channel loop is no longer
    vectorized.)"""
    if "conv" not in block.name_hint:
        return False
    reduce = [int(v.dom.extent) for v in block.iter_vars if int(v.iter_type) == COMM_REDUCE]
    return bool(reduce) and math.prod(reduce) <= MAX_WINDOW_TERMS
