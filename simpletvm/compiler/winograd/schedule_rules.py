"""MetaSchedule's rules for the Winograd transform blocks on CPUs: per tile and channel
chunk (both sampled), the points unrolled and the channels vectorized. TVM's own rules
unroll the body of a scalar channel loop instead, and expect 2-D sums where this
operator computes two 1-D passes."""

from __future__ import annotations

from simpletvm.compiler.winograd.compute import DATA_PACK_RULE, INVERSE_RULE


def register_schedule_rules() -> None:
    """Make the transform blocks' schedule rules known to MetaSchedule in this process
    (it looks a block's ``schedule_rule`` up as ``s_tir.meta_schedule.cpu.<name>``).
    Every process that generates design spaces calls this; safe to call again."""
    import tvm_ffi

    for name, rule in ((DATA_PACK_RULE, _schedule_data_pack), (INVERSE_RULE, _schedule_inverse)):
        tvm_ffi.register_global_func(f"s_tir.meta_schedule.cpu.{name}", rule, override=True)


def _schedule_data_pack(sch, data_pack):
    """The input transform: per tile and channel chunk, the padded tile, then both 1-D
    passes, unrolled over the tile's points and vectorized over the channels."""
    (rows,) = sch.get_producers(data_pack)
    (input_tile,) = sch.get_producers(rows)
    (data_pad,) = sch.get_producers(input_tile)
    tile_inner = _schedule_transform(sch, data_pack, rows)
    sch.compute_inline(input_tile)
    # the tile's padded input, per chunk: a location inside the vectorized transform
    # (which a sampled location may be) computes wrong values
    sch.compute_at(data_pad, tile_inner, preserve_unit_loops=True)
    sch.vectorize(sch.get_loops(data_pad)[-1])
    return [sch]


def _schedule_inverse(sch, inverse):
    """The output transform, scheduled as the input transform is."""
    (rows,) = sch.get_producers(inverse)
    _schedule_transform(sch, inverse, rows)
    return [sch]


def _schedule_transform(sch, block, rows):
    """Tile ``block``'s (point, point, tile, channel) loops as tile and channel chunks
    (sampled), with its first pass ``rows`` computed per chunk; the points unrolled, the
    channels innermost and vectorized. Returns the loop over the tiles of a chunk."""
    first, second, tile, channel = sch.get_loops(block)
    tile_outer, tile_inner = sch.split(
        tile, sch.sample_perfect_tile(tile, n=2, max_innermost_factor=64)
    )
    channel_outer, channel_inner = sch.split(
        channel, sch.sample_perfect_tile(channel, n=2, max_innermost_factor=64)
    )
    sch.reorder(tile_outer, channel_outer, tile_inner, first, second, channel_inner)
    sch.compute_at(rows, tile_inner, preserve_unit_loops=True)
    for loop in (first, second):
        sch.unroll(loop)
    sch.vectorize(channel_inner)
    # the first pass's own loops, below the three of the chunk: (point, point, tile,
    # channel) and, for the output transform's, its reduction over the points last
    row_first, row_second, row_tile, row_channel, *reduction = sch.get_loops(rows)[3:]
    if reduction:
        sch.reorder(row_tile, *reduction, row_channel)
    for loop in (row_first, row_second, *reduction):
        sch.unroll(loop)
    sch.vectorize(row_channel)
    return tile_inner
