"""TuningJob carrying out its plan with MetaSchedule's real search, and the fake builder
and runner of simpletvm.testing in place of compiling and timing."""

from __future__ import annotations

import json
import sqlite3

import psutil
import pytest

from simpletvm import BenchmarkingContext, SimpleTVM
from simpletvm.testing import fake_builder, fake_runner
from simpletvm.tuning.cost_model import load_store_cost_model
from simpletvm.tuning.job import TuningJob
from simpletvm.tuning.options import TuningOptions
from simpletvm.tuning.records import RecordStore, tvm_target_key
from simpletvm.tuning_session import tuning_job

pytestmark = pytest.mark.slow  # MetaSchedule's search runs for real

SEARCH = {"population": 32, "genetic_iterations": 1, "transfer_learning": False}


@pytest.fixture(scope="module")
def fused(tiny_onnx, tmp_path_factory):
    stvm = SimpleTVM(BenchmarkingContext("cpu", store=tmp_path_factory.mktemp("store")))
    return stvm.from_model(tiny_onnx)


def job_of(stvm, records, run_id, seed=0, **options):
    return TuningJob(
        stvm.fused_module,
        stvm.target,
        TuningOptions(candidates_per_iteration=4, seed=seed, **SEARCH, **options),
        records=records,
        builder=fake_builder(),
        runner=fake_runner(seed),
        run_id=run_id,
    )


def measured(path, run_id) -> list[tuple[int, str]]:
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT workload_id, json FROM records WHERE run_id = ?", (run_id,)
        ).fetchall()
    return [(workload, json.dumps(json.loads(text)[0])) for workload, text in rows]


def test_the_job_spends_its_budget_and_commits_every_measurement(fused, tmp_path):
    records = RecordStore(tmp_path / "records.sqlite")
    job = job_of(fused, records, "a" * 32, total_trials=20)
    stages = []
    while not job.is_complete():
        stages.append(job.run_stage())
    job.finalize()
    open_files = [f.path for f in psutil.Process().open_files()]
    assert not any(path.startswith(str(records.path)) for path in open_files)  # closed
    assert job.trials == 20 and records.count(run_id="a" * 32) == 20
    kinds = [stage.kind for stage in stages]
    assert kinds[:4] == ["select", "build", "profile", "update"]
    assert {stage.kind for stage in stages if stage.on_device} == {"profile"}
    assert all(p.history for p in job.progress)  # every task measured


def test_selects_sample_the_design_space_until_the_cost_model_can_predict(fused, tmp_path):
    """While XGBoost predicts at random (before its warm-up samples) a select draws its
    batch from the design space instead of evolving a population; then the evolutionary
    search takes over. The two never offer a module the run measured."""
    context = BenchmarkingContext("cpu", store=tmp_path / "store")
    records, run_id = RecordStore(tmp_path / "records.sqlite"), "e" * 32
    job = TuningJob(
        fused.fused_module,
        fused.target,
        TuningOptions(candidates_per_iteration=16, seed=0, total_trials=140, **SEARCH),
        records=records,
        builder=fake_builder(),
        runner=fake_runner(0),
        context=context,
        run_id=run_id,
    )
    job.run()
    measured_before, sampled, evolved = 0, [], []  # selects, by the trials measured before
    for stage in context.stages:
        if stage["stage"] == "select" and stage["candidates"]:
            (sampled if stage.get("sampled") else evolved).append(measured_before)
        if stage["stage"] == "update":
            measured_before += stage["candidates"]
    assert sampled and max(sampled) < 100  # XGBoost's num_warmup_samples
    assert evolved and max(evolved) >= 100
    rows = measured(tmp_path / "records.sqlite", run_id)
    assert len(rows) == job.trials == 140 and len(set(rows)) == len(rows)


def test_xgboost_trains_only_once_it_holds_its_warmup_samples(fused, tmp_path, monkeypatch):
    """Below its warm-up count XGBoost predicts at random whatever it was trained on: the
    updates keep every measurement and leave the training to the one that reaches it."""
    import xgboost

    trained_on, train = [], xgboost.train

    def counting_train(params, dtrain, *args, **kwargs):
        trained_on.append(dtrain.num_row())
        return train(params, dtrain, *args, **kwargs)

    monkeypatch.setattr(xgboost, "train", counting_train)
    job = TuningJob(
        fused.fused_module,
        fused.target,
        TuningOptions(candidates_per_iteration=16, seed=0, total_trials=112, **SEARCH),
        records=RecordStore(tmp_path / "records.sqlite"),
        builder=fake_builder(),
        runner=fake_runner(0),
        run_id="f" * 32,
    )
    job.run()
    assert job.trials == 112
    assert trained_on, "never trained, though the job measured past the warm-up count"
    assert min(trained_on) >= 100, trained_on  # XGBoost's num_warmup_samples


def store_job(fused, tmp_path, run_id, cost_model_file, total_trials, **options):
    context = BenchmarkingContext("cpu", store=tmp_path / "store")
    job = TuningJob(
        fused.fused_module,
        fused.target,
        TuningOptions(
            candidates_per_iteration=16,
            seed=0,
            total_trials=total_trials,
            population=32,
            genetic_iterations=1,
            **options,
        ),
        records=RecordStore(tmp_path / "records.sqlite"),
        builder=fake_builder(),
        runner=fake_runner(0),
        context=context,
        run_id=run_id,
        cost_model_file=cost_model_file,
    )
    return job, context


def test_a_job_starts_from_the_store_cost_model_and_adds_to_it(fused, tmp_path):
    """The first job on a store leaves its cost model there; the next starts from it:
    its selects evolve on predictions from the first (none samples at random while a
    cold model would), and its measurements join the file."""
    from tvm.s_tir.meta_schedule.cost_model import XGBModel

    file = tmp_path / "store" / "cost_models" / "llvm.tar"
    first, _ = store_job(fused, tmp_path, "1" * 32, file, 112)
    first.run()
    saved = XGBModel()
    assert load_store_cost_model(saved, file) == 112 and saved.booster is not None

    second, context = store_job(fused, tmp_path, "2" * 32, file, 32)
    second.run()
    selects = [s for s in context.stages if s["stage"] == "select" and s["candidates"]]
    assert selects and not any(s.get("sampled") for s in selects)
    assert load_store_cost_model(XGBModel(), file) == 112 + 32


def test_a_store_model_of_other_workloads_leaves_the_job_cold_and_takes_its_measurements(
    fused, keras_model, tmp_path
):
    """A model trained only on another model's workloads is not started from (it ranked
    new workloads no better than sampling, BENCHMARKS.md); the job's measurements still
    join it, beside the other model's."""
    from tvm.s_tir.meta_schedule.cost_model import XGBModel

    other = SimpleTVM(BenchmarkingContext("cpu", store=tmp_path / "other")).from_model(
        keras_model  # NHWC, depthwise: no workload of the ONNX model's
    )
    file = tmp_path / "store" / "cost_models" / "llvm.tar"
    first, _ = store_job(other, tmp_path, "6" * 32, file, 112)
    first.run()
    job, context = store_job(fused, tmp_path, "7" * 32, file, 112)
    job.run()
    assert any(s.get("sampled") for s in context.stages if s["stage"] == "select")  # cold
    assert load_store_cost_model(XGBModel(), file) == 112 + 112


def test_autotune_starts_from_the_store_cost_model_of_its_target(fused, tiny_onnx, tmp_path):
    """``tuning_session.tuning_job`` (what autotune() and the schedulers run) finds the model
    the store keeps for its target: its first select evolves on predictions."""
    stvm = SimpleTVM(BenchmarkingContext("cpu", store=tmp_path / "store")).from_model(tiny_onnx)
    file = stvm.store.cost_model_path(tvm_target_key(stvm.target.tvm_target()))
    first, _ = store_job(fused, tmp_path, "5" * 32, file, 112)
    first.run()
    job = tuning_job(stvm, TuningOptions(total_trials=16, seed=0))
    try:
        job.run_stage()
    finally:
        job.finalize()
    select = stvm.context.stages[-1]
    assert select["stage"] == "select" and select["candidates"] and not select.get("sampled")


def test_without_transfer_learning_a_job_neither_reads_nor_writes_the_store_model(fused, tmp_path):
    file = tmp_path / "store" / "cost_models" / "llvm.tar"
    job, context = store_job(fused, tmp_path, "3" * 32, file, 112, transfer_learning=False)
    job.run()
    assert not file.exists()
    assert any(s.get("sampled") for s in context.stages if s["stage"] == "select")


def test_an_unreadable_store_model_costs_warmth_not_the_job(fused, tmp_path):
    """A damaged file: a warning naming it, the job tunes cold, and its model replaces
    the file."""
    from tvm.s_tir.meta_schedule.cost_model import XGBModel

    file = tmp_path / "store" / "cost_models" / "llvm.tar"
    file.parent.mkdir(parents=True)
    file.write_bytes(b"not a cost model")
    job, context = store_job(fused, tmp_path, "4" * 32, file, 112)
    job.run()
    assert job.trials == 112
    assert any(s.get("sampled") for s in context.stages if s["stage"] == "select")
    log = context.store.log_path(context.run_id).read_text()
    assert "unreadable, starting cold" in log and str(file) in log
    assert load_store_cost_model(XGBModel(), file) == 112


def test_a_resumed_job_measures_nothing_twice_and_keeps_one_budget(fused, tmp_path):
    records, run_id = RecordStore(tmp_path / "records.sqlite"), "b" * 32
    first = job_of(fused, records, run_id, seed=1, trials=12)
    while records.count(run_id=run_id) < 10:
        first.run_stage()  # then stopped without finishing, as by a SIGKILL
    before = measured(tmp_path / "records.sqlite", run_id)

    second = job_of(fused, records, run_id, seed=1, trials=12)  # same seed: same search
    assert second.trials == len(before)  # what the stopped job measured counts
    second.run()
    after = measured(tmp_path / "records.sqlite", run_id)
    assert set(before) <= set(after) and len(after) == len(set(after))
    assert all(p.trials <= 12 for p in second.progress)
    assert second.trials == len(after)


def test_the_closing_round_replaces_each_tasks_best_timings_without_adding_records(fused, tmp_path):
    from simpletvm.compiler.lowering import workload_key
    from simpletvm.tuning.records import record_latency

    records, run_id = RecordStore(tmp_path / "records.sqlite"), "c" * 32
    job = job_of(fused, records, run_id, total_trials=20, remeasure=2)
    stages = []
    while not job.is_complete():
        stages.append(job.run_stage())
    summary = job.finalize()
    closing = [stage for stage in stages if stage.remeasure]
    assert closing and not any(stage.remeasure for stage in stages[: -len(closing)])
    assert {stage.kind for stage in closing} == {"select", "build", "profile", "update"}
    assert records.count(run_id=run_id) == 20  # new timings replace, they add no record
    target = tvm_target_key(job.target.tvm_target())
    for task, progress in zip(job.tasks, job.progress):
        best = records.top(workload_key(task.dispatched[0]), target, 1, run_id=run_id)
        assert record_latency(best[0]) == pytest.approx(progress.best_latency_s)
        assert progress.remeasured >= min(2, progress.trials)
    assert summary["remeasured"] == sum(p.remeasured for p in job.progress)
    # the search's best were the luckiest of its random timings: timed again, they rose
    assert summary["estimated_latency_s"] > summary["search_estimated_latency_s"]


def test_each_profile_stage_times_its_first_candidate_twice_and_drops_the_first(fused, tmp_path):
    """A stage's first timing runs slow (BENCHMARKS.md): it must not reach the records."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerResult

    from simpletvm.testing import finished_future

    calls = []

    @derived_object
    class FirstSlowRunner(PyRunner):
        def run(self, runner_inputs):
            calls.append([str(item.artifact_path) for item in runner_inputs])
            return [
                finished_future(RunnerResult([1.0 if i == 0 else 1e-3 * (1 + i)], None))
                for i in range(len(runner_inputs))
            ]

    records, run_id = RecordStore(tmp_path / "records.sqlite"), "d" * 32
    job = TuningJob(
        fused.fused_module,
        fused.target,
        TuningOptions(candidates_per_iteration=4, seed=0, total_trials=12, **SEARCH),
        records=records,
        builder=fake_builder(),
        runner=FirstSlowRunner(),
        run_id=run_id,
    )
    job.run()
    assert calls and all(len(inputs) >= 2 and inputs[0] == inputs[1] for inputs in calls)
    assert job.trials == 12 == records.count(run_id=run_id)
    with sqlite3.connect(tmp_path / "records.sqlite") as db:
        latencies = [
            json.loads(text)[1][0]
            for (text,) in db.execute("SELECT json FROM records WHERE run_id = ?", (run_id,))
        ]
    assert len(latencies) == 12 and max(latencies) < 0.1
