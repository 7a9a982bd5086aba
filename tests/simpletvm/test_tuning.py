"""A small real autotune: the tuned build must beat the untuned build of the same model."""

from __future__ import annotations

import re

import numpy as np
import pytest

from simpletvm import BenchmarkingContext, SimpleTVM
from simpletvm.runtime.comparison import (
    at_thread_counts,
    simpletvm_runner,
    time_side_by_side,
)
from simpletvm.targets import resolve_target
from simpletvm.testing import fake_builder, fake_runner
from simpletvm.tuning.database import RecordDatabase
from simpletvm.tuning.job import TuningJob
from simpletvm.tuning.options import TuningOptions
from simpletvm.tuning.record_files import open_records
from simpletvm.tuning.records import RecordStore
from simpletvm.tuning_session import finish_scheduled_tuning, tuning_job

FAST_SEARCH = {"population": 64, "genetic_iterations": 1}

# every test here uses the module's real autotune (the tuned fixture), or tunes a model of
# its own: those are a group of their own (OWN_TUNING), which another worker may take
pytestmark = pytest.mark.slow
OWN_TUNING = pytest.mark.xdist_group("tests/simpletvm/test_tuning.py::own tuning")


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, tiny_onnx):
    store = tmp_path_factory.mktemp("store")
    stvm = SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(tiny_onnx)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    stvm.autotune(trials=4, candidates_per_iteration=4, seed=0, remeasure=3, **FAST_SEARCH)
    expected = stvm.build(records=None).run(x)
    stvm.build(records="run")
    return {"stvm": stvm, "store": store, "x": x, "expected": expected}


def test_tuned_build_is_faster_and_still_correct(tuned):
    """The tuned build beats TVM's naive code (the default schedules are a tuning candidate
    too), both timed in alternating rounds in this process on one thread, so that
    whatever else the machine runs slows both alike (on two threads a busy core would
    slow the tuned build's parallel loops, not the naive serial ones)."""
    stvm, x = tuned["stvm"], tuned["x"]
    untuned = stvm.build(records=None, default_schedules=False).evaluate(repeat=10)
    assert untuned.last_evaluation["tuned"] is False
    runners = {"untuned": simpletvm_runner(untuned, x)}
    tuned_build = stvm.build(records="run").evaluate(repeat=10)
    assert tuned_build.last_evaluation["tuned"] is True
    runners["tuned"] = simpletvm_runner(tuned_build, x)
    with at_thread_counts(runners, [1]) as on_one:
        one_thread = {name: counts[1] for name, counts in on_one.items()}
        samples = time_side_by_side(one_thread, rounds=10, calls=10, warmup=3)
    assert np.median(samples["tuned"]) < np.median(samples["untuned"]), samples
    np.testing.assert_allclose(stvm.run(x), tuned["expected"], atol=1e-4)


def test_every_stage_is_recorded_in_order(tuned):
    ctx = tuned["stvm"].context
    summary = tuned["stvm"].tuning_summary
    assert ctx.model["num_tasks"] == summary["num_tasks"] == 6  # with the NHWC input transpose
    by_task: dict[int, list[str]] = {}
    for stage in ctx.stages:
        assert stage["end"] >= stage["start"]
        expected = "device:local" if stage["stage"] == "profile" else "client"
        assert stage["resource"] == expected
    for stage in ctx.stages:  # a select that offers nothing ends its task's search or round
        if stage["stage"] != "select" or stage["candidates"]:
            by_task.setdefault(stage["task"], []).append(stage["stage"])
    for task, kinds in by_task.items():
        assert kinds == ["select", "build", "profile", "update"] * (len(kinds) // 4), task
    closing = [s for s in ctx.stages if s.get("remeasure")]  # each task's best timed again
    assert {s["task"] for s in closing if s["stage"] == "update"} == set(by_task)
    assert not any(s.get("remeasure") for s in ctx.stages[: len(ctx.stages) - len(closing)])
    profiled = [s for s in ctx.stages if s["stage"] == "profile"]
    assert all(s["candidates"] >= 1 for s in profiled)
    updates = [s for s in ctx.stages if s["stage"] == "update"]
    assert all(s["best_latency_s"] > 0 for s in updates)
    assert set(ctx.stage_durations()) == {"select", "build", "profile", "update"}
    assert summary["trials"] == sum(t["trials"] for t in summary["tasks"]) > 5
    assert summary["errors"] == 0
    # profiled on this machine by a local runner: no RPC tracker or server involved
    assert ctx.tuning["runner"] == "local" and ctx.tuning["rpc_tracker"] is None


@pytest.mark.slow
def test_records_are_stored_under_the_run_id_with_the_best_per_workload(tuned):
    stvm, store = tuned["stvm"], tuned["store"]
    records, run_id = open_records(store), stvm.context.run_id
    assert records.count(run_id=run_id) == len(records) == stvm.tuning_summary["trials"]
    assert len(records.best()) == records.count(best_only=True) == 6
    target = stvm.target.tvm_target()
    assert len(RecordDatabase(records, target, scope="run", run_id=run_id)) == len(records)
    assert len(RecordDatabase(records, target, scope="best")) == 6


@pytest.mark.slow
@pytest.mark.parametrize("source", ["run id", "best", "records file"])
def test_another_run_builds_with_the_records_through_the_database(tuned, source):
    stvm, store = tuned["stvm"], tuned["store"]
    records = {
        "run id": stvm.context.run_id,
        "best": "best",
        "records file": str(store / "records.sqlite"),
    }[source]
    other = (
        SimpleTVM(BenchmarkingContext("cpu", store=store))
        .from_model(stvm.model.source)
        .build(records=records)
    )
    build = next(s for s in other.context.steps if s["step"] == "build")
    assert build["records_loaded"] >= 6
    np.testing.assert_allclose(other.run(tuned["x"]), tuned["expected"], atol=1e-4)


@pytest.mark.slow
def test_transfer_learning_seeds_the_search_from_every_run(tuned):
    stvm = tuned["stvm"]

    def job(transfer: bool, run_id: str) -> TuningJob:
        return TuningJob(
            stvm.fused_module,
            stvm.target,
            TuningOptions(trials=8, transfer_learning=transfer),
            records=open_records(tuned["store"]),
            run_id=run_id,
        )

    assert len(job(True, "warm")._database) == stvm.tuning_summary["trials"]
    assert len(job(False, "cold")._database) == 0


def test_early_stopping_ends_tasks_without_improvement(tuned, tmp_path):
    stvm = tuned["stvm"]
    options = TuningOptions(
        trials=64,
        candidates_per_iteration=4,
        early_stopping=4,
        transfer_learning=False,
        seed=1,
        **FAST_SEARCH,
    )
    job = TuningJob(
        stvm.fused_module,
        resolve_target("cpu"),
        options,
        records=RecordStore(tmp_path / "r.sqlite"),
        builder=fake_builder(),
        runner=fake_runner(1),
    )
    job.run()
    assert job.is_complete() and job.next_stage() is None
    trials = [(p.trials, p.iterations, p.trials_since_improvement) for p in job.progress]
    assert all(p.trials < 64 for p in job.progress), trials
    stopped_early = [p.trials_since_improvement >= 4 for p in job.progress]
    assert any(stopped_early), trials
    # the others are spaces too small for a second iteration: they end by themselves
    assert all(p.iterations == 1 for p, early in zip(job.progress, stopped_early) if not early)


def test_global_trial_budget_caps_the_job(tuned, tmp_path):
    stvm = tuned["stvm"]
    options = TuningOptions(
        trials=8,
        total_trials=10,
        candidates_per_iteration=4,
        transfer_learning=False,
        seed=2,
        **FAST_SEARCH,
    )
    job = TuningJob(
        stvm.fused_module,
        stvm.target,
        options,
        records=RecordStore(tmp_path / "r.sqlite"),
        builder=fake_builder(),
        runner=fake_runner(2),
    )
    assert job.next_stage().kind == "select" and not job.next_stage().on_device
    job.run()
    assert job.trials <= 10
    # a budget below tasks x batch size is shared out: no task is left untuned
    assert all(p.trials >= 1 for p in job.progress), [p.trials for p in job.progress]


def test_a_budget_too_small_for_every_task_is_named(tuned, tmp_path):
    stvm = tuned["stvm"]
    options = TuningOptions(trials=8, total_trials=3, transfer_learning=False, **FAST_SEARCH)
    with pytest.warns(UserWarning, match="total_trials=3 cannot measure all 6 tasks"):
        TuningJob(
            stvm.fused_module, stvm.target, options, records=RecordStore(tmp_path / "r.sqlite")
        )


def test_a_wall_clock_budget_ends_the_job(tuned, tmp_path):
    stvm = tuned["stvm"]
    options = TuningOptions(trials=64, minutes=1e-4, transfer_learning=False, seed=3, **FAST_SEARCH)
    job = TuningJob(
        stvm.fused_module,
        stvm.target,
        options,
        records=RecordStore(tmp_path / "r.sqlite"),
        builder=fake_builder(),
        runner=fake_runner(3),
    )
    job.run()
    # the budget ran out during the first iteration, yet every task was measured once
    # (an unmeasured task would keep its naive schedule): then nothing more
    assert job.is_complete()
    assert [p.iterations for p in job.progress] == [1] * len(job.tasks)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"minutes": 0}, "minutes must be positive"),
        ({"number": 3}, "cache_flush .* needs number=1"),
        ({"trials": 0}, "trials must be at least 1"),
        ({"search_strategy": "annealing"}, "unknown search_strategy 'annealing'.*evolutionary"),
        ({"cost_model": "mlp"}, "unknown cost_model 'mlp'.*xgb"),
        ({"early_stopping": 0}, "early_stopping"),
        ({"candidates_per_iteration": 0}, "candidates_per_iteration"),
    ],
)
def test_bad_tuning_options_are_named(tuned, kwargs, message):
    with pytest.raises(ValueError, match=message):
        tuned["stvm"].autotune(**kwargs)


def test_candidates_that_fail_to_build_are_recorded_and_the_job_goes_on(tuned, tmp_path):
    stvm = tuned["stvm"]
    options = TuningOptions(
        trials=2,
        candidates_per_iteration=2,
        build_timeout=0.001,
        transfer_learning=False,
        seed=4,
        **FAST_SEARCH,
    )
    job = TuningJob(
        stvm.fused_module,
        stvm.target,
        options,
        records=RecordStore(tmp_path / "r.sqlite"),
        context=stvm.context,
    )
    job.run()
    summary = job.summary()
    assert job.is_complete() and summary["trials"] >= 5
    assert summary["errors"] == summary["trials"]  # every candidate timed out building
    assert len(RecordStore(tmp_path / "r.sqlite")) == 0
    builds = [s for s in stvm.context.stages[-4 * len(job.tasks) :] if s["stage"] == "build"]
    assert builds and all(s["errors"] == s["candidates"] for s in builds)


def test_gradient_order_measures_every_task_then_the_heaviest(tuned, tmp_path):
    stvm = tuned["stvm"]
    options = TuningOptions(
        trials=16,
        total_trials=32,
        candidates_per_iteration=4,
        transfer_learning=False,
        seed=5,
        **FAST_SEARCH,
    )
    context = BenchmarkingContext("cpu", store=tmp_path / "store")
    job = TuningJob(
        stvm.fused_module,
        stvm.target,
        options,
        records=RecordStore(tmp_path / "r.sqlite"),
        context=context,
    )
    job.run()
    updates = [s for s in context.stages if s["stage"] == "update" and not s.get("remeasure")]
    tasks = len(job.tasks)
    assert [s["task"] for s in updates[:tasks]] == list(range(tasks))  # the first round
    weights = [p.weight for p in job.progress]
    after_first_round = {s["task"]: s["best_latency_s"] for s in updates[:tasks]}
    heaviest = max(range(tasks), key=lambda t: weights[t] * after_first_round[t])
    assert updates[tasks]["task"] == heaviest
    assert job.trials == 32 and job.is_complete()
    # the first round measured each task's FLOPs share; what followed went by expected gain
    # (weight x latency over iterations so far, see test_task_order), starting at the heaviest
    first_round = [s["candidates"] for s in updates[:tasks]]
    assert all(1 <= n <= first for n, first in zip(first_round, job.first_round))
    extra = [p.trials - first for p, first in zip(job.progress, job.first_round)]
    assert extra[heaviest] > 0
    assert sum(s["candidates"] for s in updates) == job.trials


@OWN_TUNING
def test_a_tuned_build_repacks_weights_once_and_runs_its_entry_as_compiled_code(
    keras_model, image, tmp_path
):
    import tvm
    from tvm import relax

    from simpletvm.compiler.build import apply_records, compile_fused

    stvm = SimpleTVM(BenchmarkingContext("cpu", store=tmp_path)).from_model(keras_model)
    stvm.autotune(trials=2, candidates_per_iteration=2, seed=0, **FAST_SEARCH)
    database = RecordDatabase(
        open_records(tmp_path), stvm.target.tvm_target(), scope="run", run_id=stvm.context.run_id
    )
    applied = apply_records(stvm.fused_module, stvm.target, database)
    # the tuned convolutions and the dense read weights and biases in their own layout,
    # repacked at build time: as plain constants, with no tuple of them (folding leaves
    # one per kernel) for the VM to build and take apart on every call
    assert applied["main"].script().count("_prepacked") >= 3
    values = [binding.value for block in applied["main"].body.blocks for binding in block.bindings]
    assert values and not any(isinstance(v, (relax.Tuple, relax.TupleGetItem)) for v in values)
    executable = compile_fused(stvm.fused_module, stvm.target, database)
    assert "vm_tir_func" in executable.as_text()  # compiled entry, not bytecode
    # ... unless asked for bytecode, whose calls a VM instrument sees (profiling)
    assert (
        "vm_tir_func"
        not in compile_fused(stvm.fused_module, stvm.target, database, bytecode=True).as_text()
    )
    vm = relax.VirtualMachine(executable, stvm.target.device())
    output = vm["main"](tvm.runtime.tensor(image)).numpy()
    np.testing.assert_allclose(output, keras_model(image).numpy(), rtol=1e-4, atol=1e-5)


def test_a_task_that_cannot_be_scheduled_is_skipped_and_the_rest_tuned(
    tuned, tmp_path, monkeypatch
):
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from simpletvm.compiler.build import compile_fused
    from simpletvm.compiler.lowering import extract_tasks

    stvm = tuned["stvm"]
    victim = extract_tasks(stvm.fused_module, stvm.target)[0].task_name
    original = ms.TuneContext.pre_tuning

    def pre_tuning(self, *args, **kwargs):
        if self.task_name == victim:  # as MetaSchedule fails on some fused patterns
            raise RuntimeError(
                "ScheduleError: An error occurred in the schedule primitive 'reverse-compute-at'"
            )
        return original(self, *args, **kwargs)

    monkeypatch.setattr(ms.TuneContext, "pre_tuning", pre_tuning)
    options = TuningOptions(
        trials=4, candidates_per_iteration=4, transfer_learning=False, seed=6, **FAST_SEARCH
    )
    records = RecordStore(tmp_path / "r.sqlite")
    job = TuningJob(
        stvm.fused_module,
        stvm.target,
        options,
        records=records,
        builder=fake_builder(),
        runner=fake_runner(6),
        run_id="skip",
    )
    job.run()
    summary = job.summary()
    assert [s["task"] for s in summary["skipped_tasks"]] == [victim]
    assert "reverse-compute-at" in summary["skipped_tasks"][0]["error"]
    others = [t for t in summary["tasks"] if t["task"] != victim]
    assert all(t["trials"] >= 1 and t["best_latency_s"] for t in others)
    # the skipped task is built with its default schedule; the model builds and is right
    executable = compile_fused(
        stvm.fused_module,
        stvm.target,
        RecordDatabase(records, stvm.target.tvm_target(), scope="run", run_id="skip"),
    )
    vm = relax.VirtualMachine(executable, stvm.target.device())
    output = vm["main"](tvm.runtime.tensor(tuned["x"])).numpy()
    np.testing.assert_allclose(output, tuned["expected"], rtol=1e-4, atol=1e-5)


def test_a_task_whose_candidates_all_fail_is_skipped_after_a_few(tuned, tmp_path):
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerFuture, RunnerResult

    @derived_object
    class LostDevice(PyRunner):
        def run(self, runner_inputs):
            futures = []
            for _ in runner_inputs:
                future = RunnerFuture(
                    lambda: True, lambda: RunnerResult(None, "RuntimeError: device lost")
                )
                futures.append(future)
            return futures

    stvm = tuned["stvm"]
    options = TuningOptions(
        trials=32, candidates_per_iteration=4, transfer_learning=False, seed=7, **FAST_SEARCH
    )
    job = TuningJob(
        stvm.fused_module,
        stvm.target,
        options,
        records=RecordStore(tmp_path / "r.sqlite"),
        builder=fake_builder(),
        runner=LostDevice(),
    )
    job.run()
    summary = job.summary()
    assert job.is_complete() and summary["skipped_tasks"]
    for skipped in summary["skipped_tasks"]:
        assert re.fullmatch(
            r"all \d+ candidates failed; the last: RuntimeError: device lost", skipped["error"]
        ), skipped
    skipped = {s["task"] for s in summary["skipped_tasks"]}
    for task in summary["tasks"]:
        assert task["best_latency_s"] is None
        if task["task"] in skipped:  # given up after a few, not after the 32 allowed
            assert 8 <= task["trials"] < 8 + options.candidates_per_iteration
        else:  # a design space too small to reach 8 candidates ended by itself
            assert task["trials"] < 8


@OWN_TUNING
@pytest.mark.slow
def test_a_buffered_job_builds_from_its_own_records_when_the_store_never_gets_them(
    tmp_path, tiny_onnx
):
    """A Ray job on a node without the driver's file system: its records go back to the
    driver with each stage and never reach this machine's store, yet its build of the
    run applies them."""
    store = tmp_path / "node-store"
    stvm = SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(tiny_onnx)
    job = tuning_job(
        stvm,
        TuningOptions(
            trials=4,
            candidates_per_iteration=4,
            seed=0,
            remeasure=0,
            transfer_learning=False,
            **FAST_SEARCH,
        ),
        buffer_records=True,
    )
    job.run()
    finish_scheduled_tuning(stvm, job, None, "local")
    assert job.records.drain()  # what the driver writes into its own store
    assert open_records(store).count(run_id=stvm.context.run_id) == 0
    stvm.build(records="run")
    build = stvm.context.steps[-1]
    assert build["step"] == "build" and build["records_loaded"] == job.trials > 0
    stvm.close()
    assert open_records(store).count(run_id=stvm.context.run_id) == 0
    assert stvm.run(np.zeros((1, 3, 32, 32), "float32")).shape == (1, 10)


@OWN_TUNING
def test_autotune_shows_its_progress_when_asked(tiny_onnx, tmp_path, capsys):
    stvm = SimpleTVM(BenchmarkingContext("cpu", store=tmp_path)).from_model(tiny_onnx)
    stvm.autotune(minutes=0.03, seed=0, progress=True, remeasure=0, **FAST_SEARCH)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("tuning ")]
    assert len(lines) >= 2, err
    assert re.search(r"\d+ of \d+ tasks measured", lines[0]), lines
    assert re.search(
        rf"{stvm.tuning_summary['trials']} trials, estimate [\d.]+ ms.*elapsed", lines[-2]
    ), lines
    assert re.search(r"spent \d+:\d\d of the 0:02 budget: .*searching", lines[-1]), lines
