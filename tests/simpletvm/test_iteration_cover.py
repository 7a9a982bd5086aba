"""Every schedule SimpleTVM makes runs every iteration of every block.

A pad after a convolution's epilogue (``conv -> hard-swish -> pad``, ahead of a stride-2
depthwise convolution in MobileNetV3) fuses into the convolution's kernel.
MetaSchedule's tiling then moves the pad into the convolution's tiles, where it runs
only the iterations that read a tile: the border stayed unwritten, holding whatever
that memory held before, so the model's answer hung on what had run before it in the
process.
"""

from __future__ import annotations

import numpy as np
import pytest
from model_factories import with_cores

from simpletvm import BenchmarkingContext, SimpleTVM
from simpletvm.compiler.core_split import space_generator
from simpletvm.compiler.default_schedules import default_schedule
from simpletvm.compiler.iteration_cover import EveryIteration, uncovered_blocks
from simpletvm.targets import resolve_target

SIZE, IN_CHANNELS, OUT_CHANNELS = 12, 16, 24


@pytest.fixture(scope="module")
def target():
    return with_cores(resolve_target("cpu"), 2)


def conv_hard_swish_pad_task(before: int, after: int):
    """A 1x1 NHWC convolution, hard-swish (``y * relu6(y + 3) / 6``), then a pad of the
    map, ``before`` rows and columns ahead and ``after`` behind: one PrimFunc, as
    FuseOps makes it."""
    import tvm
    from tvm import te, topi

    x = te.placeholder((1, SIZE, SIZE, IN_CHANNELS), name="x")
    w = te.placeholder((1, 1, IN_CHANNELS, OUT_CHANNELS), name="w")
    y = topi.nn.conv2d_nhwc(x, w, 1, 0, 1)
    swish = te.compute(
        y.shape,
        lambda *i: y(*i) * te.min(te.max(y(*i) + 3.0, 0.0), 6.0) / 6.0,
        name="hard_swish",
    )
    padded = topi.nn.pad(swish, [0, before, before, 0], [0, after, after, 0])
    func = te.create_prim_func([x, w, padded]).with_attr("global_symbol", "main")
    return tvm.IRModule({"main": func})


def run(func, target, arrays):
    """The function's output, which starts as NaN: a value it never writes stays NaN."""
    import tvm

    library = tvm.compile(tvm.IRModule({"main": func}), target=target)
    tensors = [tvm.runtime.tensor(a) for a in arrays]
    library["main"](*tensors)
    return tensors[-1].numpy()


def arrays_for(task):
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    rng = np.random.default_rng(0)
    shapes = [[int(n) for n in info.as_json()[2]] for info in ArgInfo.from_prim_func(task["main"])]
    *inputs, output = shapes
    return [rng.uniform(-4, 4, shape).astype("float32") for shape in inputs] + [
        np.full(output, np.nan, dtype="float32")
    ]


@pytest.mark.parametrize(("before", "after"), [(0, 1), (1, 1)], ids=["behind", "around"])
def test_the_default_schedule_of_a_convolution_with_a_pad_writes_the_border(target, before, after):
    task = conv_hard_swish_pad_task(before, after)
    arrays = arrays_for(task)
    naive = run(task["main"], target, arrays)
    scheduled = default_schedule(task, target).mod["main"]
    assert uncovered_blocks(scheduled) == []
    np.testing.assert_allclose(run(scheduled, target, arrays), naive, rtol=1e-5, atol=1e-5)


def test_a_pad_moved_into_the_convolutions_tiles_misses_its_border_and_is_rejected(target):
    from tvm.s_tir import meta_schedule as ms

    task = conv_hard_swish_pad_task(0, 1)
    assert uncovered_blocks(task["main"]) == []
    context = ms.TuneContext(
        mod=task, target=target, space_generator=space_generator(task, target), rand_state=1
    )
    moved = [
        space
        for space in context.generate_design_space()
        if any(inst.kind.name == "ReverseComputeAt" for inst in space.trace.insts)
    ]
    assert moved  # MetaSchedule's tiling computes the epilogue per tile
    for space in moved:
        assert uncovered_blocks(space.mod["main"]) == ["PadInput"]
        assert not EveryIteration().apply(space.copy())


def test_no_candidate_the_search_samples_misses_the_border(target):
    from tvm.s_tir import meta_schedule as ms

    task = conv_hard_swish_pad_task(0, 1)
    context = ms.TuneContext(
        mod=task,
        target=target,
        space_generator=space_generator(task, target),
        search_strategy=ms.search_strategy.EvolutionarySearch(
            population_size=16, init_min_unmeasured=4, genetic_num_iters=1
        ),
        rand_state=1,
        num_threads=1,
    )
    spaces = context.generate_design_space()
    context.pre_tuning(
        max_trials=16,
        num_trials_per_iter=16,
        design_spaces=spaces,
        database=ms.database.MemoryDatabase(),
        cost_model=ms.cost_model.RandomModel(),
    )
    candidates = context.generate_measure_candidates()
    assert candidates
    assert all(uncovered_blocks(c.sch.mod["main"]) == [] for c in candidates)


def relative_error(result, reference) -> float:
    return float(np.abs(result - reference).max() / np.abs(reference).max())


@pytest.mark.slow  # converts two Keras models and builds three times
def test_mobilenet_v3_gives_keras_logits_whatever_was_built_before(store, keras_model, image):
    import keras

    keras.utils.set_random_seed(0)
    model = keras.applications.MobileNetV3Small(
        weights=None, input_shape=(64, 64, 3), classifier_activation=None
    )
    x = np.random.default_rng(0).uniform(0, 255, (1, 64, 64, 3)).astype("float32")
    logits = model.predict(x, verbose=0)
    stvm = SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(model)
    first = relative_error(stvm.build(records=None).run(x), logits)
    other = SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(keras_model)
    other.build(records=None).run(image)
    second = relative_error(stvm.build(records=None).run(x), logits)
    assert first < 1e-4 and second < 1e-4, (first, second)
