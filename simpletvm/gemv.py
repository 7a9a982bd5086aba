"""A schedule space of its own for matrix-vector products: a dense layer at batch 1.

A classifier's last layer at batch 1 multiplies a vector by a weight matrix of megabytes
(MobileNetV2's 1280x1000: 5 MB) and does two FLOPs per weight it reads, so its time is
the time to stream the weights from the cache they sit in. MetaSchedule's general
tiling offers it the space of a matrix multiply (four-way tiles of the output, two of
the reduction, loop orders and cache placements), where the few points that stream
well are rare: on the quickstart model the search ended anywhere between 0.023 and
0.045 ms for this one task, the heaviest, after 100-200 trials.

The space here is the one that streams: the output columns split in three (the outer
ones run in parallel, the innermost become the vector lanes), the reduction in two,
and every column block accumulates across the whole reduction in registers before it
is written once. The weights are layout-free, so MetaSchedule stores them in exactly
this loop order (RewriteLayout): each core reads its share front to back. What is left
to search is the tile sizes and the unrolling.

:func:`mark_gemv_blocks` annotates the blocks (the same lowering feeds tuning and the
build, so the workloads match); :func:`register_rule` registers the space under
MetaSchedule's name for CPU custom rules, in each process that searches.
"""

from __future__ import annotations

from functools import lru_cache

RULE = "simpletvm_gemv"
MAX_VECTOR = 64  # most lanes (innermost column tile) and reduction tile sampled


def mark_gemv_blocks(mod):
    """``mod`` with the schedule rule set on each matrix-vector product block."""
    import tvm

    updates = {}
    for global_var, function in mod.functions.items():
        if not isinstance(function, tvm.tirx.PrimFunc):
            continue
        schedule = tvm.s_tir.Schedule(function)
        blocks = _gemv_blocks(schedule)
        if not blocks:
            continue
        for block in blocks:
            schedule.annotate(block, "schedule_rule", RULE)
        updates[global_var] = schedule.mod["main"]
    if not updates:
        return mod
    mod = mod.clone()
    for global_var, function in updates.items():
        mod.update_func(global_var, function)
    return mod


def _gemv_blocks(schedule) -> list:
    """Blocks that sum products over one reduction axis into an output with one
    spatial axis longer than 1: ``y[0, j] = sum_k x[0, k] * w[k, j]`` (or ``w[j, k]``)."""
    from tvm import tirx

    found = []
    for block_rv in schedule.get_child_blocks(schedule.get_sblock("root")):
        block = schedule.get(block_rv)
        if block.init is None or len(block.writes) != 1 or len(block.reads) != 2:
            continue
        spatial = [v for v in block.iter_vars if v.iter_type == tirx.IterVar.DataPar]
        reduce = [v for v in block.iter_vars if v.iter_type == tirx.IterVar.CommReduce]
        if len(reduce) != 1 or len(spatial) + 1 != len(block.iter_vars):
            continue
        wide = [v for v in spatial if not _is_one(v.dom.extent)]
        if len(wide) != 1 or _is_one(reduce[0].dom.extent):
            continue
        if isinstance(block.body, tirx.BufferStore) and _is_sum_of_products(block.body):
            found.append(block_rv)
    return found


def _is_one(extent) -> bool:
    return hasattr(extent, "value") and int(extent.value) == 1


def _is_sum_of_products(store) -> bool:
    from tvm import ir, tirx

    value = store.value
    return (isinstance(value, tirx.Add) and isinstance(value.b, tirx.Mul)
            and isinstance(value.a, ir.TensorLoad) and value.a.source.same_as(store.buffer))


def gemv_space(schedule, block):
    """The design space of one matrix-vector block (MetaSchedule calls it with a traced
    schedule; the samples are decisions the search mutates)."""
    from tvm import tirx

    loops = schedule.get_loops(block)
    iter_types = [v.iter_type for v in schedule.get(block).iter_vars]

    reduction = next(loop for loop, kind in zip(loops, iter_types)
                     if kind == tirx.IterVar.CommReduce)
    spatial = [loop for loop, kind in zip(loops, iter_types) if kind == tirx.IterVar.DataPar]
    columns = max(spatial, key=lambda loop: int(schedule.get(loop).extent))
    outer_spatial = [loop for loop in spatial if not loop.same_as(columns)]
    column_tiles = schedule.split(columns, schedule.sample_perfect_tile(
        columns, n=3, max_innermost_factor=MAX_VECTOR))
    reduction_tiles = schedule.split(reduction, schedule.sample_perfect_tile(
        reduction, n=2, max_innermost_factor=MAX_VECTOR))
    schedule.reorder(*outer_spatial, column_tiles[0], column_tiles[1], *reduction_tiles,
                     column_tiles[2])
    written = schedule.cache_write(block, 0, "global")
    schedule.reverse_compute_at(written, column_tiles[1], preserve_unit_loops=True)
    return [schedule]


@lru_cache(maxsize=1)
def register_rule() -> None:
    """Make :func:`gemv_space` MetaSchedule's rule for the marked blocks in this process
    (a process that generates design spaces without it falls back to the general rules,
    with a warning from MetaSchedule)."""
    import tvm

    tvm.register_global_func(f"s_tir.meta_schedule.cpu.{RULE}", gemv_space, override=True)
