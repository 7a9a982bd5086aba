"""Depthwise convolutions read their padding in place: no pad copy in their kernels, the
same outputs, and a search that tunes them."""

from __future__ import annotations

import numpy as np
import pytest

from simpletvm.compiler.build import compile_fused
from simpletvm.compiler.lowering import fuse
from simpletvm.targets import resolve_target

CHANNELS = 16


@pytest.fixture(scope="module")
def target():
    return resolve_target("cpu")


def _block_names(func) -> list[str]:
    from tvm import s_tir

    sch = s_tir.Schedule(func)
    return [sch.get(b).name_hint for b in sch.get_child_blocks(sch.get_sblock("root"))]


def _depthwise_reference(x, weight, stride, padding):
    """NHWC depthwise convolution in NumPy; ``weight`` is (channels, kh, kw, 1)."""
    _, height, width, channels = x.shape
    kh, kw = weight.shape[1:3]
    padded = np.pad(x, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
    out_h = (height + 2 * padding - kh) // stride + 1
    out_w = (width + 2 * padding - kw) // stride + 1
    out = np.zeros((1, out_h, out_w, channels), dtype=np.float32)
    for i in range(kh):
        for j in range(kw):
            window = padded[:, i : i + stride * out_h : stride, j : j + stride * out_w : stride]
            out += window * weight[:, i, j, 0]
    return out


def _model(rng, kernel: int, stride: int, *, dense_layer: bool = True):
    """``relu(depthwise(x))``, then (``dense_layer``) a 3x3 convolution summing over 16
    channels, both padded; returns the Relax module and the depthwise weights."""
    from tvm import relax

    depthwise = (rng.standard_normal((CHANNELS, kernel, kernel, 1)) * 0.1).astype("float32")
    dense = (rng.standard_normal((CHANNELS, 3, 3, CHANNELS)) * 0.1).astype("float32")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType(shape=(1, 20, 20, CHANNELS), dtype="float32"))
    with bb.function("main", [x]):
        with bb.dataflow():
            h = bb.emit(
                relax.op.nn.conv2d(
                    x,
                    relax.const(depthwise),
                    strides=stride,
                    padding=kernel // 2,
                    groups=CHANNELS,
                    data_layout="NHWC",
                    kernel_layout="OHWI",
                )
            )
            h = relax.op.nn.relu(h)
            if dense_layer:
                h = relax.op.nn.conv2d(
                    bb.emit(h),
                    relax.const(dense),
                    padding=1,
                    data_layout="NHWC",
                    kernel_layout="OHWI",
                )
            out = bb.emit_output(h)
        bb.emit_func_output(out)
    return bb.get(), depthwise


def _assert_same_as_naive(vm, fused, target, x) -> None:
    """``vm``'s output on ``x`` equals TVM's naive build of ``fused``."""
    import tvm
    from tvm import relax

    naive = relax.VirtualMachine(compile_fused(fused, target, default_schedules=False), tvm.cpu())
    np.testing.assert_allclose(
        vm["main"](tvm.runtime.tensor(x)).numpy(),
        naive["main"](tvm.runtime.tensor(x)).numpy(),
        rtol=1e-4,
        atol=1e-5,
    )


@pytest.mark.parametrize("kernel, stride", [(3, 1), (3, 2), (5, 1)])
def test_a_depthwise_convolution_reads_its_padding_in_place(target, kernel, stride):
    import tvm
    from tvm import relax

    rng = np.random.default_rng(kernel + stride)
    mod, depthwise = _model(rng, kernel, stride)
    fused = fuse(mod, target, winograd=False, layout=None)
    kernels = {
        gvar.name_hint: _block_names(func)
        for gvar, func in fused.functions_items()
        if isinstance(func, tvm.tirx.PrimFunc)
    }
    # the window-only convolution lost its pad copy; the channel-summing one kept it
    (depthwise_kernel,) = [n for n, blocks in kernels.items() if "group_conv2d_nhwc" in blocks]
    (dense_kernel,) = [n for n, blocks in kernels.items() if "conv2d_nhwc" in blocks]
    assert not any(b.startswith("pad") for b in kernels[depthwise_kernel]), kernels
    assert any(b.startswith("pad") for b in kernels[dense_kernel]), kernels

    x = rng.standard_normal((1, 20, 20, CHANNELS)).astype("float32")
    vm = relax.VirtualMachine(compile_fused(fused, target), tvm.cpu())
    # the depthwise layer alone, against NumPy
    alone, _ = _model(np.random.default_rng(kernel + stride), kernel, stride, dense_layer=False)
    first = relax.VirtualMachine(compile_fused(fuse(alone, target, layout=None), target), tvm.cpu())
    np.testing.assert_allclose(
        first["main"](tvm.runtime.tensor(x)).numpy(),
        np.maximum(_depthwise_reference(x, depthwise, stride, kernel // 2), 0),
        rtol=1e-4,
        atol=1e-5,
    )
    _assert_same_as_naive(vm, fused, target, x)


@pytest.mark.slow  # a real search: candidates built and timed on this CPU
def test_a_depthwise_convolution_without_its_pad_copy_is_tuned(target, tmp_path):
    import tvm
    from tvm import relax

    from simpletvm.tuning.database import RecordDatabase
    from simpletvm.tuning.job import TuningJob
    from simpletvm.tuning.options import TuningOptions
    from simpletvm.tuning.records import RecordStore

    rng = np.random.default_rng(0)
    mod, _ = _model(rng, 3, 2)
    fused = fuse(mod, target, winograd=False, layout=None)
    records = RecordStore(tmp_path / "records.sqlite")
    options = TuningOptions(
        trials=4,
        candidates_per_iteration=4,
        transfer_learning=False,
        seed=0,
        population=32,
        genetic_iterations=1,
    )
    job = TuningJob(fused, target, options, records=records, run_id="depthwise")
    job.run()
    summary = job.summary()
    assert not summary["skipped_tasks"], summary["skipped_tasks"]
    tuned = [t for t in summary["tasks"] if "conv2d" in t["task"]]
    assert len(tuned) == 2 and all(t["trials"] >= 4 and t["best_latency_s"] for t in tuned)
    x = rng.standard_normal((1, 20, 20, CHANNELS)).astype("float32")
    database = RecordDatabase(records, target.tvm_target(), scope="run", run_id="depthwise")
    built = relax.VirtualMachine(compile_fused(fused, target, database), tvm.cpu())
    _assert_same_as_naive(built, fused, target, x)
