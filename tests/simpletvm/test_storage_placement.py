"""Intermediate tensors sit at the middle of the storage they share: the plan's offsets,
views that share the storage, and the same outputs as TVM's own placement."""

from __future__ import annotations

import numpy as np
import pytest

from simpletvm.compiler.build import apply_records, compile_fused
from simpletvm.compiler.lowering import fuse
from simpletvm.compiler.storage_placement import (
    ALIGNMENT,
    MIN_SHIFT_BYTES,
    centre_tensors_in_storage,
    centred_offset,
    cpu_build_pipeline,
)
from simpletvm.targets import resolve_target


@pytest.fixture(scope="module")
def target():
    return resolve_target("cpu")


@pytest.fixture(scope="module")
def scheduled(target):
    """Four convolutions whose outputs (512, 128, 256 and 64 KB) take turns in shared
    storages, with their default schedules."""
    from tvm import relax

    rng = np.random.default_rng(0)

    def conv(bb, x, in_channels, out_channels, *, kernel, stride=1):
        weight = (rng.standard_normal((kernel, kernel, in_channels, out_channels)) * 0.1).astype(
            "float32"
        )
        y = bb.emit(
            relax.op.nn.conv2d(
                x,
                relax.const(weight),
                strides=stride,
                padding=kernel // 2,
                data_layout="NHWC",
                kernel_layout="HWIO",
            )
        )
        return bb.emit(relax.op.nn.relu(y))

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape=(1, 64, 64, 8), dtype="float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            h = conv(bb, x, 8, 32, kernel=3)
            h = conv(bb, h, 32, 32, kernel=3, stride=2)
            h = conv(bb, h, 32, 64, kernel=1)
            h = conv(bb, h, 64, 16, kernel=1)
            out = bb.emit_output(bb.emit(relax.op.mean(h, axis=[1, 2])))
        bb.emit_func_output(out)
    return apply_records(fuse(bb.get(), target), target, None)


def _planned(mod, target):
    """The module through Relax's passes up to and including its static memory plan."""
    import tvm
    from tvm.relax import transform

    with target.tvm_target():
        return tvm.transform.Sequential(
            [
                transform.LegalizeOps(),
                transform.ToNonDataflow(),
                transform.RemovePurityChecking(),
                transform.CallTIRRewrite(),
                transform.StaticPlanBlockMemory(),
            ]
        )(mod)


def _placements(mod):
    """(storage bytes, tensor bytes, offset, viewed from its start) of every tensor the
    plan puts in a storage of ``mod``'s entry function."""
    import math

    import tvm
    from tvm import relax

    storages, placements, viewed = {}, [], set()
    for block in mod["main"].body.blocks:
        for binding in block.bindings:
            value = binding.value
            if not isinstance(value, relax.Call) or not isinstance(value.op, tvm.ir.Op):
                continue
            if value.op.name == "relax.memory.alloc_storage":
                storages[binding.var] = int(value.args[0].values[0])
            elif value.op.name == "relax.memory.alloc_tensor":
                storage, offset, shape, _dtype = value.args[:4]
                tensor_bytes = math.prod(int(v) for v in shape.values) * 4
                placements.append([storages[storage], tensor_bytes, int(offset.value), binding.var])
            elif value.op.name == "relax.memory.ensure_zero_offset":
                viewed.add(value.args[0])
    return [(s, t, o, var in viewed) for s, t, o, var in placements]


def test_centred_offset_puts_the_midpoints_together_on_aligned_bytes():
    storage = 1_000_000
    for tensor in (200_000, 333_333, 600_064):
        offset = centred_offset(storage, tensor)
        assert offset % ALIGNMENT == 0
        assert abs((offset + tensor / 2) - storage / 2) < ALIGNMENT
    assert centred_offset(storage, storage) == 0
    # a shift too small to pay for the view leaves the tensor at the start
    assert centred_offset(storage, storage - 2 * MIN_SHIFT_BYTES + 2 * ALIGNMENT) == 0
    assert centred_offset(storage, storage - 2 * MIN_SHIFT_BYTES) == MIN_SHIFT_BYTES


def test_every_planned_tensor_sits_at_the_middle_of_its_storage(scheduled, target):
    before = _placements(_planned(scheduled, target))
    assert all(offset == 0 for _, _, offset, _ in before)  # TVM's plan: every tensor at 0
    assert any(storage > tensor for storage, tensor, _, _ in before)  # sizes take turns

    centred = _placements(centre_tensors_in_storage()(_planned(scheduled, target)))
    assert [(s, t) for s, t, _, _ in centred] == [(s, t) for s, t, _, _ in before]
    for storage, tensor, offset, viewed in centred:
        assert offset == centred_offset(storage, tensor)
        assert viewed == (offset > 0)  # the kernels see every moved tensor from its start
    assert any(offset > 0 for _, _, offset, _ in centred)


def test_the_view_of_a_centred_tensor_shares_its_storage():
    """``ensure_zero_offset`` moves the pointer on CPUs; a copy would cost every call."""
    import tvm

    storage = tvm.runtime.tensor(np.zeros(64, dtype="float32"))
    placed = storage._create_view((16,), "float32", relative_byte_offset=ALIGNMENT * 2)
    view = tvm.get_global_func("vm.builtin.ensure_zero_offset")(placed)
    np.from_dlpack(view)[:] = 1.0
    assert storage.numpy()[32:48].tolist() == [1.0] * 16
    assert storage.numpy()[:32].sum() == 0 and storage.numpy()[48:].sum() == 0


def test_centred_build_gives_the_outputs_of_tvms_own_placement(scheduled, target):
    import tvm
    from tvm import relax

    x = np.random.default_rng(1).standard_normal((1, 64, 64, 8)).astype("float32")
    device = tvm.cpu()
    outputs = []
    for executable in (
        compile_fused(scheduled, target, default_schedules=False),
        relax.build(scheduled, target.tvm_target(), exec_mode="compiled"),
    ):
        vm = relax.VirtualMachine(executable, device)
        outputs.append(vm["main"](tvm.runtime.tensor(x, device)).numpy())
    np.testing.assert_array_equal(outputs[0], outputs[1])
    assert np.abs(outputs[0]).max() > 0


def test_the_build_pipeline_is_tvms_default_with_the_centring_after_the_plan(scheduled, target):
    """The pipeline repeats TVM's default pass list (it cannot be extended in place): the
    passes each runs, recorded as they run, differ by the centring alone, so a TVM whose
    default list changes fails here rather than building differently."""
    import tvm
    from tvm import relax

    def passes_run(pipeline, wrappers: set[str]) -> list[str]:
        names: list[str] = []

        @tvm.instrument.pass_instrument
        class Recorder:
            def run_before_pass(self, _mod, info):
                names.append(info.name)

        with target.tvm_target(), tvm.transform.PassContext(instruments=[Recorder()]):
            pipeline(scheduled)
        return [name for name in names if name not in wrappers]

    theirs = passes_run(relax.get_pipeline("default"), {"_pipeline", "sequential"})
    ours = passes_run(cpu_build_pipeline(), {"SimpleTVMCPUBuild"})
    plan = ours.index("StaticPlanBlockMemory")
    assert ours[plan + 1] == "CentreTensorsInStorage"
    assert ours[: plan + 1] + ours[plan + 2 :] == theirs
