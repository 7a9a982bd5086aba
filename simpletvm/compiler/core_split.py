"""Which axis of a kernel the cores split between them, in every CPU schedule SimpleTVM
makes: the default schedules and every candidate the search samples.

TVM gives each core a contiguous share of a parallel loop, the loop being MetaSchedule's
outer tile levels fused in the block's own order: for a convolution, the rows first. On a
host whose two cores sit far apart (a cache line between them takes 0.4 us where it took
0.05) a kernel loses a quarter or more when its core reads what the other core wrote, or
when both cores stream the same weights from memory; the peers hardly notice that state
(BENCHMARKS.md, "host states"). So:

- most blocks keep their order: the cores split the image by rows, as the kernels before
  and after them do, and each reads what it wrote;
- a block whose weights outweigh both its image and its output (a 3x3 convolution of
  512 channels on a 7x7 map: 2.4 M weights against 25 K values in and out; a dense
  layer) leads with its output channels: each core streams only its share of the
  weights, and what the cores exchange, the image, is the smaller part. A layer whose
  image outweighs its weights keeps the rows (MobileNetV2's 14x14 projections, 384
  channels in and 64 out: splitting the channels would have each core read half its
  input from the other to save a fifth as much in weights);
- the Winograd product (``bgemm``: point, point, tile, channel) leads with its tiles, as
  the transforms before and after it split them, unless a tile's reduction outweighs
  the tiles (then the points keep the lead: each core reads its share of the
  transformed weights).

:class:`SplitAcrossCores` is a schedule rule run after MultiLevelTiling: it moves the
leading axis's outer tile loop to the front, a ``Reorder`` in the design space's trace,
so every sampled candidate and every record of it carries the split.
"""

from __future__ import annotations

import math

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.schedule_rule import PyScheduleRule
from tvm.s_tir.schedule import ScheduleError

from simpletvm.compiler.winograd.compute import PRODUCT_BLOCK

DATA_PAR, COMM_REDUCE = 0, 2
TILING_MARK = "meta_schedule.tiling_structure"


def leading_axis(
    name: str,
    spatial: list[tuple[str, int]],
    reduce: list[tuple[str, int]],
    channel: str | None,
) -> str | None:
    """The spatial iteration variable whose outer tile level should lead the block's
    parallel loop, or None for the block's own order. ``spatial`` and ``reduce``:
    (variable, extent) in the block's order; ``channel``: the variable of the output's
    innermost index."""
    outer = [var for var, _ in spatial if var != channel]
    depth = math.prod(extent for _, extent in reduce)
    if name == PRODUCT_BLOCK and outer:
        tiles, tile_extent = outer[-1], dict(spatial)[outer[-1]]
        return tiles if reduce and depth <= tile_extent else None
    if not reduce or channel is None:
        return None
    # per output channel and position: weights depth (window x input channels) and
    # window x output channels against each input channel and each output channel
    positions = math.prod(extent for var, extent in spatial if var != channel)
    window = depth // reduce[-1][1]  # the innermost reduction: the input channels
    outweighs_output = depth > positions
    outweighs_input = window * dict(spatial)[channel] > positions
    return channel if outweighs_output and outweighs_input else None


def block_axes(block) -> tuple[list[tuple[str, int]], list[tuple[str, int]], str | None]:
    """A block's spatial and reduction (variable, extent) pairs and its channel variable
    (the output's innermost index), as :func:`leading_axis` takes them."""
    axes = [(str(v.var), int(v.dom.extent), int(v.iter_type)) for v in block.iter_vars]
    spatial = [(var, extent) for var, extent, kind in axes if kind == DATA_PAR]
    reduce = [(var, extent) for var, extent, kind in axes if kind == COMM_REDUCE]
    return spatial, reduce, channel_var(block)


def channel_var(block) -> str | None:
    """The block's iteration variable of its output's innermost index, if it is one."""
    if not block.writes:
        return None
    last = block.writes[0].region[-1].min
    for v in block.iter_vars:
        if v.var.same_as(last):
            return str(v.var)
    return None


@derived_object
class SplitAcrossCores(PyScheduleRule):
    """After MultiLevelTiling: the outer tile loop of :func:`leading_axis`'s axis moves in
    front of the other outer tile loops (one loop per spatial axis, in the block's
    order, each named ``<axis>_0`` by the tiling); a block not tiled so is left alone."""

    def _initialize_with_tune_context(self, context) -> None:
        pass

    def apply(self, sch, block_rv):
        block = sch.get(block_rv)
        if TILING_MARK not in (block.annotations or {}):
            return [sch]
        spatial, reduce, channel = block_axes(block)
        lead = leading_axis(block.name_hint, spatial, reduce, channel)
        if lead is None:
            return [sch]
        index = [var for var, _ in spatial].index(lead)
        loops = sch.get_loops(block_rv)[: len(spatial)]
        names = [str(sch.get(loop).loop_var.name) for loop in loops]
        if index == 0 or len(loops) < len(spatial) or not all(n.endswith("_0") for n in names):
            return [sch]
        try:
            sch.reorder(loops[index], *loops[:index])
        except ScheduleError:  # not perfectly nested after all: the block's order stays
            pass
        return [sch]

    def clone(self):
        return SplitAcrossCores()


def space_generator(task_mod, tvm_target):
    """The design space generator for ``task_mod`` on ``tvm_target``: MetaSchedule's own
    for the target (``post-order-apply``) with :class:`SplitAcrossCores` after its
    tiling rules on CPUs; MetaSchedule's own elsewhere (GPUs bind threads instead)."""
    from tvm.s_tir import meta_schedule as ms

    if tvm_target.kind.name != "llvm":
        return "post-order-apply"
    own = ms.TuneContext(mod=task_mod, target=tvm_target, space_generator="post-order-apply")
    rules = list(own.space_generator.sch_rules)
    tiling = [i for i, rule in enumerate(rules) if type(rule).__name__.startswith("MultiLevel")]
    at = tiling[-1] + 1 if tiling else len(rules)
    return ms.space_generator.PostOrderApply(
        sch_rules=[*rules[:at], SplitAcrossCores(), *rules[at:]],
        postprocs=list(own.space_generator.postprocs),
        mutator_probs=dict(own.space_generator.mutator_probs),
    )
