"""Default schedules: every CPU kernel without a record is parallel and vectorized, and
computes what TVM's naive schedule computes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from model_factories import make_conv3x3_task, make_conv_task, make_matvec_task, with_cores
from tir_inspection import blocks_in_loops, parallel_loops, split_axes

from simpletvm.compiler.build import compile_fused
from simpletvm.compiler.default_decisions import (
    PARALLEL_MIN_WORK,
    CpuShape,
    register_tile,
    vector_width,
)
from simpletvm.compiler.default_schedules import (
    apply_default_schedules,
    default_schedule,
    loop_kinds,
)
from simpletvm.compiler.lowering import fuse
from simpletvm.targets import resolve_target

# a kernel whose loops run this many iterations or more must run parallel (smaller ones
# run on one thread: a fork-join costs them more than it saves)
SIGNIFICANT_WORK = PARALLEL_MIN_WORK


@pytest.fixture(scope="module")
def target():
    return resolve_target("cpu")


def _module(build, inputs):
    """A Relax module ``main(*inputs)`` whose body ``build(bb, *vars)`` emits."""
    from tvm import relax

    bb = relax.BlockBuilder()
    params = [
        relax.Var(f"x{i}", relax.TensorType(shape=shape, dtype="float32"))
        for i, shape in enumerate(inputs)
    ]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(build(bb, *params))
        bb.emit_func_output(out)
    return bb.get()


def _const(rng, shape, scale=0.1):
    from tvm import relax

    return relax.const((rng.standard_normal(shape) * scale).astype("float32"))


def _run(executable, arrays):
    import tvm
    from tvm import relax

    vm = relax.VirtualMachine(executable, tvm.cpu())
    out = vm["main"](*[tvm.runtime.tensor(a) for a in arrays])
    return out.numpy()


def _check(mod, inputs, target, *, winograd=False, vector_ops=()):
    """Default-scheduled build == naive build; every default-scheduled kernel of
    significant work is parallel, and those named in ``vector_ops`` (substrings of their
    names) are vectorized. Returns the default-scheduled kernels' loop kinds."""
    import tvm

    fused = fuse(mod, target, winograd=winograd, layout=None)
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(shape).astype("float32") for shape in inputs]
    naive = _run(compile_fused(fused, target, default_schedules=False), arrays)
    scheduled = _run(compile_fused(fused, target), arrays)
    np.testing.assert_allclose(scheduled, naive, rtol=1e-4, atol=1e-5)

    with target.tvm_target():
        mod_scheduled, failed = apply_default_schedules(fused, target)
    assert not failed, failed
    kinds = {}
    for gvar, func in mod_scheduled.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            kinds[gvar.name_hint] = loop_kinds(fused[gvar.name_hint]), loop_kinds(func)
    assert kinds
    for name, (before, after) in kinds.items():
        if before["work"] >= SIGNIFICANT_WORK:
            assert after["parallel"], (name, after)
        if any(op in name for op in vector_ops):
            assert after["vectorized"] or after["vector_dtype"], (name, after)
    return kinds


def _conv(bb, x, weight, *, stride=1, padding=1, groups=1):
    from tvm import relax

    conv = bb.emit(
        relax.op.nn.conv2d(
            x,
            weight,
            strides=stride,
            padding=padding,
            groups=groups,
            data_layout="NHWC",
            kernel_layout="OHWI",
        )
    )
    return relax.op.nn.relu(conv)


def test_direct_conv_3x3(target):
    rng = np.random.default_rng(0)
    w = _const(rng, (32, 3, 3, 16))
    mod = _module(lambda bb, x: _conv(bb, x, w), [(1, 14, 14, 16)])
    _check(mod, [(1, 14, 14, 16)], target, vector_ops=("conv2d",))


def _check_1x1_then(target, shape, w1, w2, **second):
    """A 1x1 convolution of an image of ``shape`` with ``w1``, then a 3x3 one with ``w2``
    (``second``: its stride, groups), checked by :func:`_check`; its kernels' kinds."""

    def build(bb, x):
        h = bb.emit(_conv(bb, x, w1, padding=0))
        return _conv(bb, h, w2, **second)

    return _check(_module(build, [shape]), [shape], target, vector_ops=("conv2d",))


def test_conv_1x1_and_strided(target):
    rng = np.random.default_rng(0)
    w1, w2 = _const(rng, (64, 1, 1, 32)), _const(rng, (32, 3, 3, 64))
    kinds = _check_1x1_then(target, (1, 16, 16, 32), w1, w2, stride=2)
    assert sum("conv2d" in name for name in kinds) == 2, kinds


def test_depthwise_conv(target):
    rng = np.random.default_rng(0)
    w = _const(rng, (32, 3, 3, 1))
    mod = _module(lambda bb, x: _conv(bb, x, w, groups=32), [(1, 32, 32, 32)])
    _check(mod, [(1, 32, 32, 32)], target, vector_ops=("conv2d",))


def test_winograd_transforms_and_bgemm(target):
    rng = np.random.default_rng(0)
    w = _const(rng, (32, 3, 3, 32))
    mod = _module(lambda bb, x: _conv(bb, x, w), [(1, 28, 28, 32)])
    kinds = _check(mod, [(1, 28, 28, 32)], target, winograd=True, vector_ops=("winograd",))
    assert any("winograd" in name for name in kinds), kinds


def test_dense_and_matmul(target):
    from tvm import relax

    rng = np.random.default_rng(0)
    w, b = _const(rng, (256, 64)), _const(rng, (64,))

    def build(bb, x, y):
        h = bb.emit(relax.op.add(relax.op.matmul(x, w), b))
        return relax.op.matmul(y, relax.op.reshape(h, (1, 64, 16)))

    _check(
        _module(build, [(16, 256), (1, 8, 64)]),
        [(16, 256), (1, 8, 64)],
        target,
        vector_ops=("matmul",),
    )


def test_pooling(target):
    from tvm import relax

    def build(bb, x):
        m = bb.emit(relax.op.nn.max_pool2d(x, 3, 2, 1, layout="NHWC"))
        a = bb.emit(relax.op.nn.avg_pool2d(m, 2, 2, layout="NHWC"))
        return relax.op.mean(a, axis=[1, 2])

    _check(
        _module(build, [(1, 64, 64, 32)]),
        [(1, 64, 64, 32)],
        target,
        vector_ops=("max_pool", "avg_pool"),
    )


def test_reductions_and_softmax(target):
    from tvm import relax

    def build(bb, x):
        s = bb.emit(relax.op.sum(x, axis=[1], keepdims=True))
        return relax.op.nn.softmax(relax.op.add(x, s), axis=-1)

    kinds = _check(_module(build, [(256, 512)]), [(256, 512)], target, vector_ops=("add",))
    assert any(after["parallel"] for _, after in kinds.values()), kinds


def test_elementwise_and_layout(target):
    from tvm import relax

    def build(bb, x, y):
        z = bb.emit(relax.op.nn.relu(relax.op.add(x, y)))
        t = bb.emit(relax.op.permute_dims(z, [0, 3, 1, 2]))
        p = bb.emit(relax.op.nn.pad(t, [0, 0, 0, 0, 1, 1, 1, 1]))
        c = bb.emit(relax.op.concat([p, p], axis=1))
        return relax.op.reshape(c, (1, 64, 66 * 66))

    kinds = _check(
        _module(build, [(1, 64, 64, 32), (1, 64, 64, 32)]),
        [(1, 64, 64, 32), (1, 64, 64, 32)],
        target,
        vector_ops=("add",),
    )
    assert all(after["parallel"] for _, after in kinds.values()), kinds


def test_scatter(target):
    """A scatter into zeros (as MaxUnpooling2D imports) has no tiled design space; it gets
    the plain one."""
    from tvm import relax

    size = 32 * 32 * 16
    # distinct slots: the result does not depend on the order the updates land in
    slots = np.random.default_rng(0).permutation(4 * size)[:size].reshape(size, 1)

    def build(bb, x):
        scattered = bb.emit(
            relax.op.scatter_nd(
                relax.op.zeros((4 * size,), "float32"),
                relax.const(slots.astype("int64")),
                relax.op.reshape(x, (size,)),
            )
        )
        return relax.op.reshape(scattered, (1, 64, 64, 16))

    kinds = _check(_module(build, [(1, 32, 32, 16)]), [(1, 32, 32, 16)], target)
    assert any("scatter_nd" in name for name in kinds), kinds


def test_epilogue_with_a_pad_that_cannot_follow_the_tile(target):
    """``relu(conv(x) + b + pad(y))`` fused into one kernel: the tuning spaces cannot move
    the pad into a tile of the convolution, so the default comes from the plain space,
    parallel and vectorized, and computes what the naive schedule computes."""
    import tvm
    from tvm import te, topi

    x = te.placeholder((1, 28, 28, 16), name="x")
    w = te.placeholder((3, 3, 16, 32), name="w")
    b = te.placeholder((32,), name="b")
    y = te.placeholder((1, 28, 28, 16), name="y")
    conv = topi.nn.conv2d_nhwc(x, w, 1, 1, 1)
    padded = topi.nn.pad(y, [0, 0, 0, 0], [0, 0, 0, 16], name="pad")
    out = te.compute(
        conv.shape,
        lambda n, h, i, c: te.max(conv[n, h, i, c] + b[c] + padded[n, h, i, c], 0.0),
        name="out",
    )
    func = te.create_prim_func([x, w, b, y, out]).with_attr("global_symbol", "main")
    task = tvm.IRModule({"main": func})
    sch = default_schedule(task, target.tvm_target())
    kinds = loop_kinds(sch.mod["main"])
    assert kinds["parallel"] and (kinds["vectorized"] or kinds["vector_dtype"]), kinds

    rng = np.random.default_rng(0)
    arrays = [
        rng.standard_normal([int(n) for n in t.shape]).astype("float32") for t in (x, w, b, y)
    ]
    results = []
    for mod in (task, sch.mod):
        kernel = tvm.compile(mod, target=target.tvm_target())
        args = [tvm.runtime.tensor(a) for a in arrays]
        args.append(tvm.runtime.tensor(np.zeros((1, 28, 28, 32), "float32")))
        kernel(*args)
        results.append(args[-1].numpy())
    np.testing.assert_allclose(results[1], results[0], rtol=1e-4, atol=1e-5)


def test_deterministic(target):
    import tvm
    from tvm import te

    a = te.placeholder((1, 64, 64, 64), name="a")
    b = te.compute(a.shape, lambda *i: te.max(a(*i), 0.0), name="b")
    task = tvm.IRModule({"main": te.create_prim_func([a, b]).with_attr("global_symbol", "main")})
    first = default_schedule(task, target.tvm_target())
    second = default_schedule(task, target.tvm_target())
    assert str(first.trace) == str(second.trace)
    tvm.ir.assert_structural_equal(first.mod, second.mod)


def test_vector_lanes_of_targets():
    import tvm

    znver4 = CpuShape.of(tvm.target.Target({"kind": "llvm", "mcpu": "znver4"}))
    skylake = CpuShape.of(tvm.target.Target({"kind": "llvm", "mcpu": "skylake"}))
    assert (znver4.lanes, znver4.vector_registers) == (16, 32)
    assert (skylake.lanes, skylake.vector_registers) == (8, 16)
    assert (
        CpuShape.of(tvm.target.Target({"kind": "llvm", "mcpu": "znver3", "num-cores": 2})).cores
        == 2
    )


def test_register_tile_sizes():
    # AVX-512 (16 accumulators): two vectors by up to 7 rows
    assert register_tile(32, 7, 16) == (2, 7)
    assert register_tile(32, 56, 16) == (2, 7)
    assert register_tile(32, 48, 16) == (2, 6)
    # AVX2 (8 accumulators): 7 rows of one vector beat 1 row of two
    assert register_tile(32, 7, 8) == (1, 7)
    assert register_tile(32, 56, 8) == (2, 4)
    # an odd number of channel vectors, a width of 1 (a dense layer)
    assert register_tile(125, 1, 16) == (1, 1)
    assert register_tile(3, 14, 16) == (1, 7)


def test_conv_register_tile_is_innermost(target):
    """A 3x3 convolution on a 7x7 map: its innermost tile is rows of output pixels by
    vectors of channels, so each weight vector loaded serves every row."""
    task = make_conv3x3_task(7, 64)
    shape = CpuShape.of(target.tvm_target())
    lanes = min(shape.lanes, 64)
    vectors, rows = register_tile(64 // lanes, 7, shape.vector_registers // 2)
    sch = default_schedule(task, target.tvm_target())
    tiles = [
        [int(f) for f in decision]
        for inst, decision in sch.trace.decisions.items()
        if inst.kind.name == "SamplePerfectTile" and len(decision) == 4
    ]
    n, h, w_, c = tiles[:4]  # the output's axes, in order
    assert c[-1] == lanes * vectors and w_[-1] == rows, tiles
    assert rows == 7


def test_vector_width_takes_whole_quarters_of_a_register():
    assert vector_width(24, 16) == 12  # three quarters of an AVX-512 register, not half
    assert vector_width(64, 16) == 16
    assert vector_width(1000, 16) == 8  # not 10
    assert vector_width(24, 8) == 8
    assert vector_width(3, 16) == 3


def _output_tiles(sch) -> list[list[int]]:
    """The 4-level tile decisions of a convolution's output axes (n, h, w, c)."""
    return [
        [int(f) for f in decision]
        for inst, decision in sch.trace.decisions.items()
        if inst.kind.name == "SamplePerfectTile" and len(decision) == 4
    ][:4]


def test_few_channels_fill_the_register_tile_with_a_second_row():
    """24 output channels on AVX-512 are one vector of 12: its register tile takes two
    rows of 7 positions, 14 accumulators, where one row left half the registers idle; a
    depthwise convolution, whose weights differ per channel, keeps one row."""
    import tvm

    znver4 = tvm.target.Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    _, h, w_, c = _output_tiles(default_schedule(make_conv_task(56, 144, 24, kernel=1), znver4))
    assert (h[-1], w_[-1], c[-1]) == (2, 7, 12), (h, w_, c)
    _, h, w_, c = _output_tiles(default_schedule(make_conv_task(14, 64, 64, kernel=1), znver4))
    assert (h[-1], w_[-1], c[-1]) == (1, 7, 32), (h, w_, c)  # two vectors by 7: full


def _depthwise_task(size: int, channels: int):
    """A 3x3 depthwise NHWC convolution task as a model's is legalized: a group
    convolution with one input channel a group, so it sums over an axis of extent 1."""
    import tvm
    from tvm import te, topi

    x = te.placeholder((1, size, size, channels), name="x")
    w = te.placeholder((3, 3, 1, channels), name="w")
    y = topi.nn.group_conv2d_nhwc(x, w, 1, 1, 1, channels)
    return tvm.IRModule({"main": te.create_prim_func([x, w, y]).with_attr("global_symbol", "main")})


def _innermost_shared_loop(func, first: str, second: str):
    """The innermost loop around both blocks ``first`` and ``second``, or None."""
    blocks = blocks_in_loops(func)
    outer, inner = blocks[first][1], blocks[second][1]
    shared = [a for a, b in zip(outer, inner, strict=False) if a.same_as(b)]
    return shared[-1] if shared else None


@pytest.mark.parametrize(
    ("channels", "inner"), [(96, True), (8, False)], ids=["whole-vectors", "part-of-a-vector"]
)
def test_the_output_is_written_per_tile_below_the_parallel_job(channels, inner):
    """The block that writes a convolution's output from its accumulators (here the
    output cache's) runs per tile of the level below the parallel one, while the tile is
    in the L1: at the parallel level a job's whole output (4 rows of 112 x 96 channels,
    172 KB) waited for it. Not for fewer channels than a vector: per tile their positions
    and channels fused into one vectorized loop of gathers."""
    import tvm
    from tvm.tirx import ForKind

    znver4 = tvm.target.Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})
    sch = default_schedule(make_conv_task(112, 16, channels, kernel=1), znver4)
    loop = _innermost_shared_loop(sch.mod["main"], "conv2d_nhwc_global", "conv2d_nhwc_update")
    assert loop is not None, sch.mod
    assert (int(loop.kind) != int(ForKind.PARALLEL)) == inner, sch.mod


def test_a_stem_over_three_channels_unrolls_less():
    """A convolution of an RGB image unrolls 16 steps, where the other layers unroll 64:
    its taps unrolled deeper ran 1.29x slower."""
    import tvm

    from simpletvm.compiler.default_decisions import FEW_CHANNELS_UNROLL_STEP, UNROLL_STEP

    znver4 = tvm.target.Target({"kind": "llvm", "mcpu": "znver4", "num-cores": 2})

    def unroll_step(task):
        [step] = [
            int(inst.attrs[0][int(decision)])
            for inst, decision in default_schedule(task, znver4).trace.decisions.items()
            if inst.kind.name == "SampleCategorical"
        ]
        return step

    assert FEW_CHANNELS_UNROLL_STEP != UNROLL_STEP
    assert unroll_step(make_conv_task(28, 3, 32, kernel=3)) == FEW_CHANNELS_UNROLL_STEP
    assert unroll_step(make_conv_task(28, 16, 32, kernel=3)) == UNROLL_STEP
    assert unroll_step(_depthwise_task(28, 32)) == UNROLL_STEP


def test_conv_of_24_channels_computes_the_convolution(target):
    rng = np.random.default_rng(0)
    w1, w2 = _const(rng, (24, 1, 1, 48)), _const(rng, (24, 3, 3, 1))
    _check_1x1_then(target, (1, 28, 28, 48), w1, w2, groups=24)


def test_matrix_vector_product_feeds_several_accumulators(target):
    """A classifier's dense layer at batch 1 has no rows to fill a register tile: its
    output channels' tiles inside the outer reduction loop (the third tile level) are
    several, so the reduction's multiply-adds feed independent accumulators instead of
    each waiting on the one before; and it computes the product."""
    import tvm

    task = make_matvec_task(1280, 1000)
    sch = default_schedule(task, target.tvm_target())
    outputs = [
        [int(f) for f in decision]
        for inst, decision in sch.trace.decisions.items()
        if inst.kind.name == "SamplePerfectTile" and len(decision) == 4
    ][1]  # the batch axis first, then the outputs
    assert math.prod(outputs) == 1000 and outputs[2] > 1, outputs
    assert outputs[3] % 4 == 0, outputs  # whole vectors innermost

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 1280)).astype("float32")
    w = rng.standard_normal((1280, 1000)).astype("float32")
    built = tvm.compile(sch.mod, target=target.tvm_target())
    out = tvm.runtime.tensor(np.zeros((1, 1000), "float32"))
    built["main"](tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
    np.testing.assert_allclose(out.numpy(), x @ w, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(
    ("size", "channels", "split"),
    [
        # 3x3x512 = 4608 weights per output channel against 49 positions: the channels
        (7, 512, {"v_ff"}),
        # 3x3x32 = 288 against 784 positions: the rows, as the neighbouring kernels
        (28, 32, {"v_yy"}),
    ],
    ids=["weight-heavy", "image-heavy"],
)
def test_cores_split_the_weights_or_the_image_whichever_is_larger(target, size, channels, split):
    """A convolution whose weights outweigh its image splits its output channels across
    the cores (each streams its share of the weights); one whose image is larger splits
    the rows, so each core reads what it wrote in the kernel before."""
    sch = default_schedule(make_conv3x3_task(size, channels), with_cores(target, 4))
    assert split_axes(sch.mod["main"], "conv2d_nhwc") == split, sch.mod


def test_the_cores_get_equal_shares_when_the_channel_tiles_do_not_split_evenly(target):
    """A 7x7 projection of 960 channels to 160 (MobileNetV2's): its weights lead, and
    its 160 channels are 5 tiles of 32, which 4 cores cannot share evenly; the rows join
    the parallel jobs, so no core works more than a tenth longer than the average."""
    from simpletvm.compiler.default_decisions import MAX_UNEVEN

    sch = default_schedule(make_conv_task(7, 960, 160, kernel=1), with_cores(target, 4))
    func = sch.mod["main"]
    assert "v_ff" in split_axes(func, "conv2d_nhwc"), sch.mod
    jobs = [int(loop.extent) for loop in parallel_loops(func)]
    assert jobs, sch.mod
    for count in jobs:
        assert -(-count // 4) * 4 / count <= MAX_UNEVEN, (count, sch.mod)


@pytest.mark.parametrize(
    ("size", "channels", "split"),
    [(56, 64, {"v_p"}), (14, 512, {"v_eps"})],
    ids=["tiles", "points"],
)
def test_winograd_product_splits_the_tiles_as_its_transforms_do(target, size, channels, split):
    """The Winograd product of a large image splits its tiles across the cores, as the
    input and output transforms around it do: no core reads a tile another transformed.
    Where a tile's reduction outweighs the tiles (512 channels, 16 tiles) it splits the
    transform points, each core reading its share of the transformed weights."""
    import tvm
    from tvm import te

    from simpletvm.compiler.winograd.compute import winograd_conv2d_nhwc

    x = te.placeholder((1, size, size, channels), name="x")
    u = te.placeholder((6, 6, channels, channels), name="u")
    y = winograd_conv2d_nhwc(x, u, (1, 1, 1, 1), tile_size=4)
    task = tvm.IRModule({"main": te.create_prim_func([x, u, y]).with_attr("global_symbol", "main")})
    sch = default_schedule(task, with_cores(target, 4))
    product = split_axes(sch.mod["main"], "bgemm")
    assert product == split, sch.mod
    for transform in ("data_pack", "inverse"):
        assert split_axes(sch.mod["main"], transform) >= {"v_p"}, (transform, sch.mod)


def test_gpu_targets_unchanged():
    from simpletvm.targets import ResolvedTarget

    gpu = ResolvedTarget({"kind": "cuda", "host": {"kind": "llvm"}}, "cuda")
    marker = object()
    assert apply_default_schedules(marker, gpu) == (marker, {})


def test_tiny_model_untuned_build_has_no_naive_kernel(tiny_onnx, tmp_path):
    """An untuned build of the tiny test model: every kernel of significant work runs
    parallel, none keeps TVM's naive schedule."""
    import tvm

    from simpletvm.api import SimpleTVM
    from simpletvm.compiler.build import apply_records
    from simpletvm.context import BenchmarkingContext

    stvm = SimpleTVM(BenchmarkingContext("cpu", store=tmp_path / "store")).from_model(
        str(tiny_onnx)
    )
    fused = stvm.fused_module
    scheduled = apply_records(fused, stvm.target, None)
    heavy = 0
    for gvar, func in scheduled.functions_items():
        if not isinstance(func, tvm.tirx.PrimFunc):
            continue
        assert func.attrs.get("tirx.is_scheduled", False), gvar.name_hint
        if gvar.name_hint in fused.get_global_vars() or True:
            work = (
                loop_kinds(fused[gvar.name_hint])["work"]
                if any(g.name_hint == gvar.name_hint for g in fused.get_global_vars())
                else 0
            )
            if work >= SIGNIFICANT_WORK:
                heavy += 1
                assert loop_kinds(func)["parallel"], gvar.name_hint
    assert heavy >= 2
    image = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    untuned = stvm.build(records=None).run(image)
    naive = _run(compile_fused(fused, stvm.target, default_schedules=False), [image])
    np.testing.assert_allclose(untuned, naive, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # a TuningJob runs MetaSchedule's search (fakes build and time)
def test_every_tasks_first_batch_holds_its_default_schedule(tiny_onnx, tmp_path):
    """Tuning never starts worse than the default: the first select of each task offers
    the default schedule, which is then measured and recorded."""
    import tvm

    from simpletvm.api import SimpleTVM
    from simpletvm.context import BenchmarkingContext
    from simpletvm.testing import fake_builder, fake_runner
    from simpletvm.tuning.job import TuningJob
    from simpletvm.tuning.options import TuningOptions
    from simpletvm.tuning.records import RecordStore

    stvm = SimpleTVM(BenchmarkingContext("cpu", store=tmp_path / "store")).from_model(
        str(tiny_onnx)
    )
    job = TuningJob(
        stvm.fused_module,
        stvm.target,
        TuningOptions(
            candidates_per_iteration=2,
            seed=0,
            trials=2,
            population=16,
            genetic_iterations=1,
            transfer_learning=False,
        ),
        records=RecordStore(tmp_path / "records.sqlite"),
        builder=fake_builder(),
        runner=fake_runner(0),
        run_id="d" * 32,
    )
    firsts = {}
    while not job.is_complete():
        spec = job.run_stage()
        if spec.kind == "select" and spec.task not in firsts and job._candidates:
            firsts[spec.task] = job._candidates[0]
    job.finalize()
    assert len(firsts) == len(job.tasks)
    for index, candidate in firsts.items():
        default = default_schedule(job.tasks[index].dispatched[0], stvm.target.tvm_target())
        tvm.ir.assert_structural_equal(candidate.sch.mod, default.mod)
