"""Which axis the cores split: the rule, and that the search's candidates carry it."""

from __future__ import annotations

import pytest
from model_factories import make_conv3x3_task, make_conv_task, with_cores
from tir_inspection import parallel_loops, split_axes

from simpletvm.compiler.core_split import leading_axis, rows_first, space_generator
from simpletvm.targets import resolve_target

CONV = [("nn", 1), ("yy", 7), ("xx", 7), ("ff", 512)]


@pytest.mark.parametrize(
    ("name", "spatial", "reduce", "lead"),
    [
        # 3x3x512 weights per output channel and per input channel against 49
        # positions: the output channels
        ("conv2d_nhwc", CONV, [("ry", 3), ("rx", 3), ("rc", 512)], "ff"),
        # 3x3x64 = 576 against 3136 positions: the block's own order (rows)
        ("conv2d_nhwc", [("nn", 1), ("yy", 56), ("xx", 56), ("ff", 64)], [("rc", 576)], None),
        # a 1x1 projection, 384 channels to 64 on 14x14: 384 weights per output channel
        # against 196 positions, but 64 per input channel: the image outweighs the
        # weights, the rows
        (
            "conv2d_nhwc",
            [("nn", 1), ("yy", 14), ("xx", 14), ("ff", 64)],
            [("ry", 1), ("rx", 1), ("rc", 384)],
            None,
        ),
        # a 1x1 expansion, 160 channels to 960 on 7x7: both outweigh 49 positions
        (
            "conv2d_nhwc",
            [("nn", 1), ("yy", 7), ("xx", 7), ("ff", 960)],
            [("ry", 1), ("rx", 1), ("rc", 160)],
            "ff",
        ),
        # a dense layer: one position, 512 terms
        ("matmul", [("i", 1), ("j", 1000)], [("k", 512)], "j"),
        # no reduction (an elementwise or a transform): its own order
        ("add", CONV, [], None),
        # the Winograd product: 196 tiles against 64 channels: the tiles
        ("bgemm", [("eps", 6), ("nu", 6), ("p", 196), ("o", 64)], [("ci", 64)], "p"),
        # 16 tiles against 512 channels: its own order (the points)
        ("bgemm", [("eps", 6), ("nu", 6), ("p", 16), ("o", 512)], [("ci", 512)], None),
    ],
    ids=[
        "weight-heavy",
        "image-heavy",
        "projection",
        "expansion",
        "dense",
        "elementwise",
        "product-tiles",
        "product-points",
    ],
)
def test_leading_axis(name, spatial, reduce, lead):
    channel = spatial[-1][0]
    assert leading_axis(name, spatial, reduce, channel) == lead


@pytest.mark.parametrize(("size", "channels", "lead"), [(7, 512, "ff_0"), (28, 32, "nn_0")])
def test_every_sampled_candidate_splits_the_leading_axis(size, channels, lead):
    """The tuning's design spaces, their decisions drawn at random and postprocessed as
    the search does (the candidates it would measure): the convolution's parallel loop
    starts with the output channels' outer tile when its weights outweigh its image,
    with the rows' (after the batch) otherwise. MetaSchedule's own spaces lead with the batch and rows either way."""
    from tvm.s_tir import meta_schedule as ms

    from simpletvm.compiler.winograd import register_schedule_rules

    register_schedule_rules()
    target = resolve_target("cpu").tvm_target()
    task = make_conv3x3_task(size, channels)
    leads = {}
    for generator in ("post-order-apply", space_generator(task, target)):
        context = ms.TuneContext(mod=task, target=target, space_generator=generator, rand_state=3)
        found = []
        for _ in range(2):
            for sch in context.generate_design_space():
                if not all(postproc.apply(sch) for postproc in context.space_generator.postprocs):
                    continue  # rejected (rows_first): the search samples another
                loops = [str(loop.loop_var.name) for loop in parallel_loops(sch.mod["main"])]
                conv = [loop for loop in loops if "_0" in loop and loop.endswith("_fused")]
                found.extend(loop.split("_0")[0] + "_0" for loop in conv)
        leads[generator if isinstance(generator, str) else "ours"] = set(found)
    assert leads["ours"] == {lead}, leads
    assert leads["post-order-apply"] == {"nn_0"}, leads


@pytest.mark.parametrize(
    ("tiles", "order"),
    [
        # the batch and two row tiles lead: the cores split rows as sampled
        ([("n", 1), ("y", 2), ("x", 4), ("n", 1), ("y", 7), ("x", 2)], [0, 1, 2, 3, 4, 5]),
        # one row tile, then two column tiles: the rows move ahead
        ([("n", 1), ("y", 1), ("x", 2), ("n", 1), ("y", 56), ("x", 1)], [0, 1, 3, 4, 2, 5]),
        # the rows all inside the inner tiles: no order splits them
        ([("n", 1), ("y", 1), ("x", 2), ("n", 1), ("y", 1), ("x", 28)], None),
    ],
    ids=["rows-lead", "columns-lead", "rows-inside"],
)
def test_rows_first(tiles, order):
    assert rows_first(tiles, ["n", "y"], 2) == order


@pytest.mark.parametrize(
    ("size", "in_channels", "out_channels"), [(56, 144, 24), (28, 32, 192), (14, 384, 64)]
)
def test_every_candidate_the_search_measures_splits_rows(size, in_channels, out_channels):
    """MobileNetV2's row-led 1x1 layers: MetaSchedule's own spaces have the cores split
    the columns or the channels in a third of their random samples (each core then reads
    half its input from the other, whose kernel wrote it by rows); of ours every sample
    the postprocessors pass splits the rows, and most pass."""
    from tvm.s_tir import meta_schedule as ms

    from simpletvm.compiler.winograd import register_schedule_rules

    register_schedule_rules()
    target = with_cores(resolve_target("cpu"), 2)
    task = make_conv_task(size, in_channels, out_channels, kernel=1)
    splits = {}
    for generator in ("post-order-apply", space_generator(task, target)):
        found = []
        for seed in range(8):
            context = ms.TuneContext(
                mod=task, target=target, space_generator=generator, rand_state=seed
            )
            for sch in context.generate_design_space():
                if all(postproc.apply(sch) for postproc in context.space_generator.postprocs):
                    found.append(split_axes(sch.mod["main"], "conv2d_nhwc", cores=2))
        splits[generator if isinstance(generator, str) else "ours"] = found
    theirs, ours = splits["post-order-apply"], splits["ours"]
    assert any(split & {"v_xx", "v_ff"} for split in theirs), theirs
    assert ours and all(split <= {"v_yy"} for split in ours), ours
    assert len(ours) >= len(theirs) // 2
