"""Which axis of a kernel the cores split between them, in every CPU schedule SimpleTVM
makes: the default schedules and every candidate the search samples.

TVM gives each core a contiguous share of a parallel loop, the loop being MetaSchedule's
outer tile levels fused in the block's own order: for a convolution, the rows first. On a
host whose two cores sit far apart (a cache line passing between them costs many times
what it costs between close cores) a kernel slows markedly when its core reads what the
other core wrote, or when both cores stream the same weights from memory; the peers
hardly notice that state. So:

- most blocks keep their order: the cores split the image by rows, as the kernels before
  and after them do, and each reads what it wrote. A candidate whose sampled tiles would
  have them split the columns or the channels instead (one outer tile of rows, two of
  columns: each core then reads half its input from the other) gets its row loops moved
  ahead (:class:`RowsAcrossCores`): alone, such a kernel times as fast as a row-split
  one, since the timing leaves its input with neither core, but inside the model the
  other core wrote half of it;
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
:class:`RowsAcrossCores` is a postprocessor, run before the parallel loops are fused: it
looks at each candidate's sampled tiles, which a rule cannot (a mutation replays the
rule's instructions with other decisions), and its reorder is part of the record's trace.
"""

from __future__ import annotations

import math

from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.postproc import PyPostproc
from tvm.s_tir.meta_schedule.schedule_rule import PyScheduleRule
from tvm.s_tir.schedule import ScheduleError

from simpletvm.compiler.winograd.compute import PRODUCT_BLOCK

DATA_PAR, COMM_REDUCE = 0, 2
TILING_MARK = "meta_schedule.tiling_structure"
OUTER_LEVELS = ("_0", "_1")  # MultiLevelTiling's loops above the first reduction level


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


def row_axes(spatial: list[tuple[str, int]], channel: str | None) -> list[str]:
    """The axes whose outer tiles the cores split for a block led by its rows: the outer
    (non-channel) axes but the innermost of them, the width (a convolution's batch and
    rows), or the one outer axis a matrix has."""
    outer = [var for var, _ in spatial if var != channel]
    return outer[:-1] if len(outer) > 1 else outer


def rows_first(loops: list[tuple[str, int]], rows: list[str], cores: int) -> list[int] | None:
    """The order (indices into ``loops``) in which the cores split rows, or None when no
    order of these loops does. ``loops``: (axis, extent) of a block's outer tile loops,
    outermost first, which TVM fuses into one parallel loop and hands each core a
    contiguous share of. The leading loops up to the first other loop of more than one
    iteration must give every core a row tile of its own: the order they have when they
    do, else the row loops moved ahead of the others, each group keeping its order."""
    lead = 1
    for axis, extent in loops:
        if axis not in rows and extent > 1:
            break
        lead *= extent
    if lead >= cores:
        return list(range(len(loops)))
    order = [i for i, (axis, _) in enumerate(loops) if axis in rows]
    if math.prod(loops[i][1] for i in order) < cores:
        return None  # the rows sit in the inner tiles
    return order + [i for i, (axis, _) in enumerate(loops) if axis not in rows]


@derived_object
class RowsAcrossCores(PyPostproc):
    """Before the parallel loops are fused: each tiled block whose cores split its image
    (:func:`leading_axis` None) gets the order :func:`rows_first` gives its outer tile
    loops (``<axis>_0`` and ``<axis>_1``, down to the first reduction level). A candidate
    none of whose orders splits rows, while its image has rows for every core (its rows
    all inside the inner tiles, or a block between its tile loops), is rejected: the
    search samples another."""

    def __init__(self, cores: int = 0) -> None:
        self.cores = cores

    def _initialize_with_tune_context(self, context) -> None:
        if not self.cores:
            attrs = dict(context.target.attrs) if context.target.attrs else {}
            self.cores = int(attrs.get("num-cores", 0) or 0) or 1

    def apply(self, sch) -> bool:
        if self.cores < 2:
            return True
        for gvar in sch.mod.get_global_vars():
            root = sch.get_sblock("root", func_name=gvar.name_hint)
            if not all(self._rows_first(sch, block) for block in sch.get_child_blocks(root)):
                return False
        return True

    def _rows_first(self, sch, block_rv) -> bool:
        block = sch.get(block_rv)
        if TILING_MARK not in (block.annotations or {}):
            return True
        spatial, reduce, channel = block_axes(block)
        rows = row_axes(spatial, channel)
        if leading_axis(block.name_hint, spatial, reduce, channel) is not None or (
            math.prod(extent for var, extent in spatial if var in rows) < self.cores
        ):
            return True
        # the tiling makes one loop per spatial axis at each level, in the block's order
        # (the loops keep the names of the loops they tile, not the block's variables)
        names = [var for var, _ in spatial]
        outer, tiles = [], []
        for index, loop in enumerate(sch.get_loops(block_rv)[: len(OUTER_LEVELS) * len(names)]):
            level = OUTER_LEVELS[index // len(names)]
            if not str(sch.get(loop).loop_var.name).endswith(level):
                break
            outer.append(loop)
            tiles.append((names[index % len(names)], int(sch.get(loop).extent)))
        order = rows_first(tiles, rows, self.cores)
        if order is None:
            return False
        if order != sorted(order):
            try:
                sch.reorder(*(outer[i] for i in order))
            except ScheduleError:  # a block between the tile loops
                return False
        return True

    def clone(self):
        return RowsAcrossCores(self.cores)


def space_generator(task_mod, tvm_target):
    """The design space generator for ``task_mod`` on ``tvm_target``: MetaSchedule's own
    for the target (``post-order-apply``) with :class:`SplitAcrossCores` after its
    tiling rules, and :class:`EveryIteration` and :class:`RowsAcrossCores` before its
    postprocessors on CPUs; MetaSchedule's own elsewhere (GPUs bind threads instead)."""
    from tvm.s_tir import meta_schedule as ms

    from simpletvm.compiler.iteration_cover import EveryIteration

    if tvm_target.kind.name != "llvm":
        return "post-order-apply"
    own = ms.TuneContext(mod=task_mod, target=tvm_target, space_generator="post-order-apply")
    rules = list(own.space_generator.sch_rules)
    tiling = [i for i, rule in enumerate(rules) if type(rule).__name__.startswith("MultiLevel")]
    at = tiling[-1] + 1 if tiling else len(rules)
    return ms.space_generator.PostOrderApply(
        sch_rules=[*rules[:at], SplitAcrossCores(), *rules[at:]],
        postprocs=[EveryIteration(), RowsAcrossCores(), *own.space_generator.postprocs],
        mutator_probs=dict(own.space_generator.mutator_probs),
    )
