"""Fusion patterns MetaSchedule cannot schedule: the task is skipped, or lowered so that
it can be tuned after all.

The model is a BlazeFace-style block made here (a shortcut padded to more channels added
to a 1x1 convolution), the shape of a shipped face detector's task that autotune() could
not schedule: ``ScheduleError`` in ``reverse-compute-at`` while generating its space.
"""

from __future__ import annotations

import numpy as np
import pytest
from model_factories import make_residual_pad_block_keras

from simpletvm import BenchmarkingContext, SimpleTVM
from simpletvm.compiler.lowering import extract_tasks, fuse

FAST = {
    "trials": 4,
    "candidates_per_iteration": 4,
    "population": 32,
    "genetic_iterations": 1,
    "seed": 0,
    "transfer_learning": False,
    "remeasure": 0,
}  # the closing round: test_tuning*.py


@pytest.fixture(scope="module")
def block():
    model = make_residual_pad_block_keras()
    x = np.random.default_rng(0).standard_normal((1, 16, 16, 16)).astype("float32")
    return model, x, model(x).numpy()


def residual_task(names):
    """The task holding the residual add and ReLU after the 1x1 convolution."""
    [name] = [n for n in names if "conv2d" in n and "relu" in n]
    return name


def design_space_error(stvm, fused, task_name) -> str | None:
    """Whether MetaSchedule can generate the task's design space (None) or its error."""
    from tvm.s_tir import meta_schedule as ms

    [task] = [t for t in extract_tasks(fused, stvm.target) if t.task_name == task_name]
    context = ms.TuneContext(
        mod=task.dispatched[0],
        target=stvm.target.tvm_target(),
        space_generator="post-order-apply",
        task_name=task_name,
    )
    try:
        context.generate_design_space()
    except Exception as error:  # noqa: BLE001 - the error is the point
        return str(error)
    return None


@pytest.mark.slow  # converts a Keras model
def test_the_residual_pad_fuses_into_an_operator_metaschedule_cannot_schedule(block, store):
    model, _, _ = block
    stvm = SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(model)
    as_imported = fuse(stvm.model.mod, stvm.target, separate_residual_pads=False)
    names = [t.task_name for t in extract_tasks(as_imported, stvm.target)]
    name = residual_task(names)
    assert "pad" in name  # the channel pad is fused into the convolution's operator
    error = design_space_error(stvm, as_imported, name)
    assert error and "reverse-compute-at" in error
    # the lowering SimpleTVM uses keeps the pad a kernel of its own: schedulable
    names = [t.task_name for t in extract_tasks(stvm.fused_module, stvm.target)]
    name = residual_task(names)
    assert "pad" not in name and any(n.startswith("pad_residual") for n in names)
    assert design_space_error(stvm, stvm.fused_module, name) is None


def test_separating_residual_pads_leaves_other_models_alone(tiny_onnx, store):
    import tvm

    stvm = SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(tiny_onnx)
    plain = fuse(stvm.model.mod, stvm.target, separate_residual_pads=False)
    tvm.ir.assert_structural_equal(stvm.fused_module, plain)


@pytest.mark.slow  # tunes
def test_autotune_skips_the_task_it_cannot_schedule_and_tunes_the_rest(block, store):
    model, x, expected = block
    ctx = BenchmarkingContext("cpu", store=store)
    # the lowering as it was before residual pads were separated
    stvm = SimpleTVM(ctx).from_model(model, lowering={"separate_residual_pads": False})
    stvm.autotune(**FAST)
    summary = stvm.tuning_summary
    [skipped] = summary["skipped_tasks"]
    assert "pad" in skipped["task"] and "relu" in skipped["task"]
    assert "ScheduleError" in skipped["error"], skipped
    assert ctx.tuning["skipped_tasks"] == summary["skipped_tasks"]
    others = [t for t in summary["tasks"] if t["task"] != skipped["task"]]
    assert len(others) == summary["num_tasks"] - 1 >= 2
    assert all(t["trials"] >= 1 and t["best_latency_s"] for t in others), others
    stvm.build(records="run")
    np.testing.assert_allclose(stvm.run(x), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.slow  # tunes
def test_with_the_residual_pad_separated_every_task_is_tuned(block, store):
    model, x, expected = block
    stvm = SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(model)
    stvm.autotune(**FAST)
    summary = stvm.tuning_summary
    assert summary["skipped_tasks"] == []
    by_name = {t["task"]: t for t in summary["tasks"]}
    name = residual_task(by_name)
    assert by_name[name]["trials"] >= 1 and by_name[name]["best_latency_s"]
    stvm.build(records="run")
    np.testing.assert_allclose(stvm.run(x), expected, rtol=1e-4, atol=1e-5)
