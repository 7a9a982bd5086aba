"""PersistentBuilder: candidates linked here for a runner on this machine, tarred for a
runner that links them on its own."""

from __future__ import annotations

import tarfile

import pytest


@pytest.fixture(scope="module")
def candidates(tiny_onnx):
    from tvm.s_tir import meta_schedule as ms

    from simpletvm.compiler.lowering import extract_tasks, fuse
    from simpletvm.models import import_model
    from simpletvm.targets import load_tensor_intrinsics, resolve_target

    target = resolve_target("cpu")
    load_tensor_intrinsics(target.kind)
    model = import_model(tiny_onnx)
    task = max(extract_tasks(fuse(model.mod, target), target), key=lambda t: t.weight)
    context = ms.TuneContext(
        mod=task.dispatched[0],
        target=target.tvm_target(),
        space_generator="post-order-apply",
        search_strategy=ms.search_strategy.ReplayTrace(),
        task_name=task.task_name,
        rand_state=0,
        num_threads=1,
    )
    context.pre_tuning(
        max_trials=2,
        num_trials_per_iter=2,
        database=ms.database.MemoryDatabase(),
        cost_model=ms.cost_model.RandomModel(),
    )
    return [
        ms.builder.BuilderInput(c.sch.mod, target.tvm_target())
        for c in context.search_strategy.generate_measure_candidates()
    ]


@pytest.mark.slow
@pytest.mark.parametrize("link", [True, False])
def test_candidates_are_linked_for_a_local_runner_and_tarred_for_a_remote_one(candidates, link):
    import tvm

    from simpletvm.tuning.builder import PersistentBuilder

    builder = PersistentBuilder(max_workers=1, link=link)
    try:
        results = builder.build(candidates)
        assert [r.error_msg for r in results] == [None] * len(candidates)
        for result in results:
            path = result.artifact_path
            if link:
                assert path.endswith(".so")
                with open(path, "rb") as library:
                    assert library.read(4) == b"\x7fELF"  # linked: loaded as it is
            else:
                assert path.endswith(".tar") and tarfile.is_tarfile(path)
            module = tvm.runtime.load_module(path)  # a tar is linked while it loads
            assert module.implements_function(module.entry_name)
    finally:
        builder.close()
