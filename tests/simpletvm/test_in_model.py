"""Tuned kernels timed against their default schedules inside the built model: the
store keeps each finding against the record it was made with, and a build applies a
record only where the default schedule did not run faster."""

from __future__ import annotations

import numpy as np
import pytest

from simpletvm import BenchmarkingContext, SimpleTVM
from simpletvm.compiler.lowering import extract_tasks
from simpletvm.errors import SimpleTVMError
from simpletvm.tuning.database import RecordDatabase
from simpletvm.tuning.record_files import open_records
from simpletvm.tuning.records import RecordStore, target_key

SKYLAKE = {"kind": "llvm", "mcpu": "skylake", "keys": ["cpu"]}
FAST_SEARCH = {"population": 64, "genetic_iterations": 1, "remeasure": 0}


def _record(serial: int, latency: float) -> list:
    trace = [[["GetBlock", [], {"name": "C"}, [f"b{serial}"]]], [serial]]
    return [trace, [latency, latency], SKYLAKE, [["TENSOR", "float32", [16, 16]]]]


def test_a_finding_holds_for_the_record_it_was_made_with(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    key = target_key(SKYLAKE)
    fast, slow = _record(1, 1e-5), _record(2, 2e-5)
    store.add("w", ["w", "{}"], [fast, slow], run_id="r")
    assert not store.default_beats("w", key, fast, margin=0.03)  # nothing timed yet

    store.note_in_model("w", key, fast, record_s=1e-4, default_s=0.8e-4, run_id="r")
    assert store.default_beats("w", key, fast, margin=0.03)
    # a finding about one record says nothing of another (a later, faster record)
    assert not store.default_beats("w", key, slow, margin=0.03)
    # within the margin the record stays
    store.note_in_model("w", key, fast, record_s=1e-4, default_s=0.98e-4, run_id="r")
    assert not store.default_beats("w", key, fast, margin=0.03)
    # the record ran faster
    store.note_in_model("w", key, fast, record_s=1e-4, default_s=1.5e-4, run_id="r")
    assert not store.default_beats("w", key, fast, margin=0.03)


def test_a_finding_for_a_workload_the_store_lacks_is_refused(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    with pytest.raises(KeyError, match="not in the record store"):
        store.note_in_model("absent", "llvm/x/", _record(1, 1e-5), 1e-4, 1e-4)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, tiny_onnx):
    store = tmp_path_factory.mktemp("store")
    stvm = SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(tiny_onnx)
    stvm.autotune(trials=8, candidates_per_iteration=8, seed=0, in_model=True, **FAST_SEARCH)
    return stvm


def test_autotune_times_every_parallel_kernel_inside_the_model(tuned):
    step = next(s for s in tuned.context.steps if s["step"] == "in_model")
    findings = tuned.in_model.findings
    assert findings and step["kernels"] == len(findings)
    assert all(f.record_ms > 0 and f.default_ms > 0 for f in findings)
    assert step["defaults_chosen"] == [f.task for f in findings if f.default_wins]
    # the kernels' shares of a run are within the run
    assert sum(f.record_ms for f in findings) < step["records_model_ms"]
    assert sum(f.default_ms for f in findings) < step["defaults_model_ms"]
    # the promise: the records' build less what the winning defaults save
    assert step["chosen_model_ms"] <= step["records_model_ms"]
    assert tuned.tuning_summary["in_model_latency_s"] == pytest.approx(
        step["chosen_model_ms"] / 1e3
    )


def test_a_build_gives_a_beaten_record_its_default_schedule(tuned):
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    untuned = tuned.build(records=None).run(x)
    database = RecordDatabase(
        open_records(tuned.store.root),
        tuned.target.tvm_target(),
        scope="run",
        run_id=tuned.context.run_id,
    )
    tasks = {f.task for f in tuned.in_model.findings}
    for task in extract_tasks(tuned.conv_forms.default, tuned.target):
        if task.task_name in tasks:  # the default schedule, 10x faster inside the model
            database.note_in_model(task.dispatched[0], record_s=1e-3, default_s=1e-4)
    tuned.build(records="run")
    build = next(s for s in reversed(tuned.context.steps) if s["step"] == "build")
    assert build["tasks_on_default_in_model"] == len(tasks)
    assert build["tasks_with_records"] == build["tasks"] - len(tasks)
    np.testing.assert_allclose(tuned.run(x), untuned, rtol=1e-4, atol=1e-5)

    for task in extract_tasks(tuned.conv_forms.default, tuned.target):
        if task.task_name in tasks:  # the records, 10x faster: applied again
            database.note_in_model(task.dispatched[0], record_s=1e-4, default_s=1e-3)
    tuned.build(records="run")
    build = next(s for s in reversed(tuned.context.steps) if s["step"] == "build")
    assert build["tasks_on_default_in_model"] == 0


def test_timing_inside_the_model_needs_this_machines_cpu(tiny_onnx, tmp_path):
    stvm = SimpleTVM(BenchmarkingContext("cuda", store=tmp_path)).from_model(tiny_onnx)
    with pytest.raises(SimpleTVMError, match="this machine's CPU"):
        stvm.choose_in_model()
