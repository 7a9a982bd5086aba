"""The SQLite record store: concurrent writers, best records, the import of JSON-lines
stores, and MetaSchedule reading and writing it through RecordDatabase."""

from __future__ import annotations

import json
import multiprocessing
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

from simpletvm.tuning.record_buffer import RecordBuffer
from simpletvm.tuning.record_files import open_records
from simpletvm.tuning.records import RecordStore, canonical_json, target_key

SKYLAKE = {"kind": "llvm", "mcpu": "skylake", "keys": ["cpu"]}
ZNVER3 = {"kind": "llvm", "mcpu": "znver3", "keys": ["cpu"]}
FAST_SEARCH = {"population": 64, "genetic_iterations": 1, "remeasure": 0}


def _record(serial: int, latency: float, target: dict = SKYLAKE) -> list:
    """A record's JSON with the shape of MetaSchedule's (trace, run_secs, target, args)."""
    trace = [[["GetBlock", [], {"name": "C"}, [f"b{serial}"]]], [serial]]
    return [trace, [latency, latency], target, [["TENSOR", "float32", [16, 16]]]]


def _write(path: str, writer: int, count: int) -> None:
    records = RecordStore(path)
    for index in range(count):
        record = _record(writer * 1000 + index, 0.001 * (1 + (index * 7919 + writer) % 97))
        records.add(f"w{index % 3}", [f"w{index % 3}", "{}"], [record], run_id=f"run{writer}")
        if index % 5 == 0:  # a retried commit: the same record again
            records.add(f"w{index % 3}", [f"w{index % 3}", "{}"], [record], run_id=f"run{writer}")


def _read(path: str, rounds: int, failures) -> None:
    records = RecordStore(path)
    for _ in range(rounds):
        for key in ("w0", "w1", "w2"):
            for record in records.top(key, target_key(SKYLAKE), 5):
                if not (isinstance(record, list) and len(record[1]) == 2):
                    failures.put(repr(record)[:200])


def test_concurrent_writers_lose_and_duplicate_nothing(tmp_path):
    path = str(tmp_path / "records.sqlite")
    RecordStore(path).count()  # the schema exists before the crowd arrives
    context = multiprocessing.get_context("spawn")
    failures = context.Queue()
    processes = [context.Process(target=_write, args=(path, w, 40)) for w in range(6)]
    processes += [context.Process(target=_read, args=(path, 30, failures)) for _ in range(2)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
        assert process.exitcode == 0
    assert failures.empty()
    records = RecordStore(path)
    assert len(records) == 6 * 40
    assert records.run_counts("run3") == {"w0": 14, "w1": 13, "w2": 13}
    # the best table agrees with the records it summarizes
    for key in ("w0", "w1", "w2"):
        fastest = records.top(key, target_key(SKYLAKE), 1)[0]
        assert records.best()[(key, target_key(SKYLAKE))] == np.mean(fastest[1])
        assert records.top(key, target_key(SKYLAKE), 1, best_only=True) == [fastest]


def test_best_record_is_kept_per_workload_and_target_on_insert(tmp_path):
    records = RecordStore(tmp_path / "records.sqlite")
    workload = ["w", "{}"]
    assert records.add("w", workload, [_record(1, 0.003), _record(2, 0.002)], run_id="a") == 2
    assert (
        records.add("w", workload, [_record(3, 0.004), _record(4, 0.001, ZNVER3)], run_id="b") == 2
    )
    assert records.best() == {("w", target_key(SKYLAKE)): 0.002, ("w", target_key(ZNVER3)): 0.001}
    assert records.add("w", workload, [_record(5, 0.0015)], run_id="c") == 1
    assert records.best(target_key(SKYLAKE)) == {("w", target_key(SKYLAKE)): 0.0015}
    assert [r[0][1] for r in records.top("w", target_key(SKYLAKE), 10)] == [[5], [2], [1], [3]]
    assert [r[0][1] for r in records.top("w", target_key(SKYLAKE), 10, run_id="a")] == [[2], [1]]
    # a record without a measurement is not kept; one committed again is one row
    assert records.add("w", workload, [[_record(6, 0)[0], [], SKYLAKE, []]]) == 0
    assert records.add("w", workload, [_record(5, 0.0015)], run_id="c") == 0
    assert len(records) == 5 and records.count(run_id="b") == 2
    assert records.count(best_only=True) == 2 and records.has_run("c")
    assert not records.has_run("d")


def test_two_runs_timing_one_trace_alike_keep_a_record_each(tmp_path):
    """Tiny kernels are timed in 10 ns steps: two runs of one model can measure a trace
    to the same figures. Each run's measurement is its own row."""
    records = RecordStore(tmp_path / "records.sqlite")
    workload = ["w", "{}"]
    assert records.add("w", workload, [_record(1, 3e-8)], run_id="a") == 1
    assert records.add("w", workload, [_record(1, 3e-8)], run_id="b") == 1
    assert records.add("w", workload, [_record(1, 3e-8)], run_id="b") == 0  # a retry
    assert records.add("w", workload, [_record(1, 3e-8)], remeasured=True, run_id="a") == 0
    assert records.count(run_id="a") == records.count(run_id="b") == 1 and len(records) == 2


def test_a_database_of_an_earlier_version_gets_identities_by_run_once(tmp_path):
    """Earlier versions left the run out of a record's identity: opening their database
    rewrites the identities once, so a record its run commits again stays one row."""
    import hashlib
    import sqlite3

    path = tmp_path / "records.sqlite"
    RecordStore(path).add("w", ["w", "{}"], [_record(1, 0.002)], run_id="a")
    earlier = sqlite3.connect(path, isolation_level=None)
    text = canonical_json(_record(1, 0.002))
    earlier.execute(
        "UPDATE records SET identity = ?",
        (hashlib.blake2b(f"w\n{text}".encode(), digest_size=16).digest(),),
    )
    earlier.execute("DELETE FROM meta")
    earlier.close()
    records = RecordStore(path)
    assert records.meta("record_identities") == "by run"
    assert records.add("w", ["w", "{}"], [_record(1, 0.002)], run_id="a") == 0
    assert records.add("w", ["w", "{}"], [_record(1, 0.002)], run_id="b") == 1
    assert len(records) == 2


def test_a_buffer_holds_writes_for_the_single_writer_and_reads_the_store(tmp_path):
    """A job on another machine buffers its records; the driver writes what it drains."""
    import pickle

    path = tmp_path / "records.sqlite"
    store = RecordStore(path)
    store.add("w1", {"w": 1}, [_record(0, 0.002)], run_id="earlier")
    buffer = pickle.loads(pickle.dumps(RecordBuffer(path)))  # as a job receives it
    assert buffer.add("w1", {"w": 1}, [_record(1, 0.001), _record(2, 0.003)], "r") == 2
    assert store.count() == 1 and buffer.count() == 1  # nothing written yet ...
    assert buffer.run_counts("earlier") == {"w1": 1}  # ... and reads see the store
    own = buffer.top("w1", target_key(SKYLAKE), 5, run_id="r")  # the run's build sees them
    assert [record[1][0] for record in own] == [0.001, 0.003]
    drained = buffer.drain()
    assert buffer.drain() == []
    for arguments in drained:
        store.add(*arguments)
    assert store.count(run_id="r") == 2 and store.run_counts("r") == {"w1": 2}


def test_a_discarded_buffer_deletes_its_private_copy_and_keeps_what_is_not_drained(tmp_path):
    def private_copies() -> set[Path]:
        return set(Path(tempfile.gettempdir()).glob(f"simpletvm-records-{os.getpid()}-*"))

    before = private_copies()
    buffer = RecordBuffer(tmp_path / "records.sqlite")
    buffer.add("w1", {"w": 1}, [_record(1, 0.001)], "r")
    copies = list(private_copies() - before)
    assert len(copies) == 1 and (copies[0] / "own.sqlite").is_file()
    buffer.close()  # a finalized job: the connections close, the run's records stay
    assert copies[0].exists()
    assert len(buffer.top("w1", target_key(SKYLAKE), 5, run_id="r")) == 1
    buffer.discard()
    assert not copies[0].exists()
    assert [arguments[0] for arguments in buffer.drain()] == ["w1"]
    assert buffer.top("w1", target_key(SKYLAKE), 5, run_id="r") == []  # the store's: none
    buffer.discard()  # twice: nothing left to do


def _legacy_store(root) -> None:
    """What the JSON-lines version left: a merged global directory, the best directory,
    and a run killed before its merge whose records are only in its own directory."""

    def write(directory, workloads, rows, garbled=False):
        directory.mkdir(parents=True)
        (directory / "workloads.jsonl").write_text(
            "".join(json.dumps({"workload": w, "json": [w, "{}"]}) + "\n" for w in workloads)
        )
        lines = [
            json.dumps(
                {
                    "workload": w,
                    "record": r,
                    "target_key": target_key(r[2]),
                    "latency_s": r[1][0],
                    "run_id": run,
                    "time": 1.0,
                }
            )
            for w, r, run in rows
        ]
        (directory / "records.jsonl").write_text(
            "\n".join(lines) + ('\n{"workload": "w1", torn' if garbled else "\n")
        )

    merged = [
        ("w1", _record(1, 0.002), "r1"),
        ("w1", _record(2, 0.001), "r1"),
        ("w2", _record(3, 0.005), "r1"),
    ]
    write(root / "database" / "global", ["w1", "w2"], merged)
    write(root / "database" / "best", ["w1", "w2"], [merged[1], merged[2]])
    write(root / "runs" / "r1" / "tuning", ["w1", "w2"], merged)
    write(root / "runs" / "r2" / "tuning", ["w2"], [("w2", _record(4, 0.004), None)], garbled=True)


def test_a_json_lines_store_is_imported_once_with_a_message(tmp_path, capfd):
    _legacy_store(tmp_path)
    records = open_records(tmp_path)
    message = capfd.readouterr().err.strip().splitlines()
    assert len(message) == 1 and "imported 4 tuning records from 4 JSON-lines" in message[0]
    assert records.path == tmp_path / "records.sqlite"
    assert len(records) == 4
    assert records.run_counts("r1") == {"w1": 2, "w2": 1}
    assert records.run_counts("r2") == {"w2": 1}  # named by its directory
    assert records.best() == {
        ("w1", target_key(SKYLAKE)): 0.001,
        ("w2", target_key(SKYLAKE)): 0.004,
    }
    assert records.workload_json("w2") == ["w2", "{}"]
    open_records(tmp_path)
    assert capfd.readouterr().err == ""  # once only
    assert len(RecordStore(tmp_path / "records.sqlite")) == 4


def test_a_json_lines_record_directory_is_a_records_path(tmp_path, capfd):
    _legacy_store(tmp_path)
    records = open_records(tmp_path / "runs" / "r1" / "tuning")
    assert "imported 3 tuning records" in capfd.readouterr().err
    assert len(records) == 3 and records.run_counts("r1") == {"w1": 2, "w2": 1}
    assert open_records(records.path).path == records.path  # a database file as it is


def test_identical_records_have_one_identity_whatever_their_key_order():
    a = [{"b": 1, "a": [1.0, 2]}, [0.1]]
    b = json.loads('[{"a": [1.0, 2], "b": 1}, [0.1]]')
    assert canonical_json(a) == canonical_json(b)


def _matmul_record(run_secs: list[float], mcpu: str = "skylake", name: str = "A"):
    """A real TuningRecord of a small matmul, its trace sampled by MetaSchedule; its
    block is named after its first input (``name``), as TVM names reductions."""
    import tvm
    from tvm import te
    from tvm.s_tir import meta_schedule as ms

    from simpletvm.targets import load_tensor_intrinsics

    load_tensor_intrinsics("llvm")
    a = te.placeholder((64, 64), name=name)
    k = te.reduce_axis((0, 64), name="k")
    b = te.placeholder((64, 64), name="B")
    c = te.compute((64, 64), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name=f"{name}_red")
    mod = tvm.IRModule({"main": te.create_prim_func([a, b, c])})
    target = tvm.target.Target({"kind": "llvm", "mcpu": mcpu, "num-cores": 2})
    context = ms.TuneContext(
        mod=mod, target=target, space_generator="post-order-apply", num_threads=1
    )
    schedule = context.generate_design_space()[0]
    return (
        mod,
        target,
        ms.database.TuningRecord(
            schedule.trace,
            ms.database.Workload(mod),
            run_secs,
            target,
            ms.arg_info.ArgInfo.from_prim_func(mod["main"]),
        ),
    )


def test_record_database_round_trips_records_and_answers_by_target(tmp_path):
    from simpletvm.tuning.database import RecordDatabase

    mod, target, record = _matmul_record([0.002, 0.002])
    records = RecordStore(tmp_path / "records.sqlite")
    writer = RecordDatabase(records, target, run_id="run1")
    assert not writer.has_workload(mod)
    workload = writer.commit_workload(mod)
    writer.commit_tuning_record(record)
    writer.commit_tuning_record(record)  # committed twice: one row
    assert len(records) == 1 and records.run_counts("run1") == {str(workload.as_json()[0]): 1}

    reader = RecordDatabase(records, target, scope="best")  # another process, say
    assert reader.has_workload(mod)
    found = reader.query_tuning_record(mod, target, "main")
    assert str(found.trace) == str(record.trace)
    assert [float(s) for s in found.run_secs] == [0.002, 0.002]
    assert reader.query_schedule(mod, target, "main") is not None
    assert len(reader.get_all_tuning_records()) == 1
    # records of another CPU are not applied here; another run's scope sees none
    _, other_target, _ = _matmul_record([0.001], mcpu="znver3")
    assert (
        RecordDatabase(records, other_target).query_tuning_record(mod, other_target, "main") is None
    )
    assert len(RecordDatabase(records, target, scope="run", run_id="run2")) == 0
    with pytest.raises(ValueError, match="unknown record scope 'latest'"):
        RecordDatabase(records, target, scope="latest")


def test_records_apply_to_a_workload_of_the_same_key_whose_blocks_are_named_otherwise(tmp_path):
    """Another model's reduction reads a tensor of another name: same key, other block."""
    from simpletvm.compiler.lowering import workload_key
    from simpletvm.tuning.database import RecordDatabase, record_as_json

    mod, target, record = _matmul_record([0.002], name="lv148")
    other_mod, _, other_record = _matmul_record([0.001], name="serving_default_x")
    assert workload_key(mod) == workload_key(other_mod)
    records = RecordStore(tmp_path / "records.sqlite")
    first = RecordDatabase(records, target, run_id="run1")
    first.commit_workload(mod)
    first.commit_tuning_record(record)

    second = RecordDatabase(records, target, run_id="run2")  # the other model's build
    found = second.query_tuning_record(other_mod, target, "main")
    assert found is not None and "serving_default_x_red" in str(found.trace)
    schedule = second.query_schedule(other_mod, target, "main")
    assert schedule is not None and schedule.get_sblock("serving_default_x_red") is not None
    # its own records are kept in the stored workload's names, and read in its own
    second.commit_workload(other_mod)
    second.commit_tuning_record(other_record)
    key = workload_key(mod)
    kept = records.top(key, second.target_key, 2)
    assert [row[1][0] for row in kept] == [0.001, 0.002]
    assert all("lv148_red" in json.dumps(row[0]) for row in kept)
    assert all("serving_default_x_red" not in json.dumps(row[0]) for row in kept)
    assert len(second.get_top_k(second.commit_workload(other_mod), 2)) == 2
    assert len(first.get_top_k(first.commit_workload(mod), 2)) == 2

    # a record whose blocks the workload does not have is passed over, not a crash
    stray = record_as_json(record)
    stray[0] = json.loads(json.dumps(stray[0]).replace("lv148_red", "elsewhere_red"))
    stray[1] = [0.0005]
    records.add(key, record.workload.as_json(), [stray], run_id="run3")
    assert len(records.top(key, first.target_key, 5)) == 3
    answered = first.get_top_k(first.commit_workload(mod), 5)
    assert [[float(s) for s in r.run_secs] for r in answered] == [[0.001], [0.002]]


@pytest.mark.slow
def test_a_tuning_run_commits_each_record_under_its_run_id_and_builds_from_them(
    tmp_path, tiny_onnx
):
    from simpletvm import BenchmarkingContext, SimpleTVM

    stvm = SimpleTVM(BenchmarkingContext("cpu", store=tmp_path)).from_model(tiny_onnx)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    expected = stvm.build(records=None).run(x)
    records, run_id = RecordStore(tmp_path / "records.sqlite"), stvm.context.run_id
    stored_after_update = []

    def on_stage(job) -> None:
        if stvm.context.stages[-1]["stage"] == "update":
            stored_after_update.append((records.count(run_id=run_id), job.trials))

    stvm.autotune(trials=4, candidates_per_iteration=4, seed=0, on_stage=on_stage, **FAST_SEARCH)
    # every update stage has stored what it measured before the next stage starts
    assert stored_after_update and all(stored == trials for stored, trials in stored_after_update)
    assert records.count(run_id=run_id) == stvm.tuning_summary["trials"] > 0
    stvm.build(records="run")
    build = next(s for s in reversed(stvm.context.steps) if s["step"] == "build")
    assert build["records_loaded"] == records.count(run_id=run_id)
    np.testing.assert_allclose(stvm.run(x), expected, rtol=1e-4, atol=1e-5)


def test_a_record_timed_again_by_its_run_replaces_its_measurement_and_the_best(tmp_path):
    store = RecordStore(tmp_path / "records.sqlite")
    key, skylake = "w1", target_key(SKYLAKE)
    store.add(key, {"w": 1}, [_record(1, 0.001), _record(2, 0.002)], run_id="r")
    store.add(key, {"w": 1}, [_record(1, 0.0015)], run_id="other")  # another run's timing
    assert store.best(skylake)[(key, skylake)] == 0.001
    # the lucky 1 ms record is 3 ms timed again: the best is now the 1.5 ms of the other run
    assert store.add(key, {"w": 1}, [_record(1, 0.003)], run_id="r", remeasured=True) == 0
    assert store.count() == 3 and store.best(skylake)[(key, skylake)] == 0.0015
    assert [r[1][0] for r in store.top(key, skylake, 5, run_id="r")] == [0.002, 0.003]
    assert [r[1][0] for r in store.top(key, skylake, 5, run_id="other")] == [0.0015]
    # a record the run does not have is added; the same timing committed again is one row
    assert store.add(key, {"w": 1}, [_record(3, 0.004)], run_id="r", remeasured=True) == 1
    assert store.add(key, {"w": 1}, [_record(1, 0.003)], run_id="r") == 0

    buffer = RecordBuffer(store.path)  # a job on another machine: through the driver
    buffer.add(key, {"w": 1}, [_record(2, 0.0005)], run_id="r", remeasured=True)
    assert [r[1][0] for r in buffer.top(key, skylake, 2, run_id="r")] == [0.0005, 0.003]
    for arguments in buffer.drain():
        store.add(*arguments)
    assert store.best(skylake)[(key, skylake)] == 0.0005 and store.count() == 4


def test_a_model_builds_with_the_records_of_its_pooling_tuned_in_another_model(tmp_path):
    """A pooling after a convolution reads an intermediate (its block ``lv..._red``); the
    same pooling as a model's first layer reads the input and is named after it: one
    key, two block names. The second model's build applies the first's record."""
    import keras
    from tvm.s_tir import meta_schedule as ms

    from simpletvm import BenchmarkingContext, SimpleTVM
    from simpletvm.compiler.lowering import extract_tasks
    from simpletvm.targets import load_tensor_intrinsics
    from simpletvm.tuning.database import RecordDatabase, block_names

    def saved(name: str, *layers) -> str:
        inputs = x = keras.Input((4, 4, 32), batch_size=1)
        for layer in layers:
            x = layer(x)
        keras.Model(inputs, x).save(tmp_path / f"{name}.keras")
        return str(tmp_path / f"{name}.keras")

    def pooling(stvm):
        tasks = extract_tasks(stvm.fused_module, stvm.target)
        return next(t.dispatched[0] for t in tasks if "mean" in t.task_name)

    store = tmp_path / "store"
    later = saved("later", keras.layers.Conv2D(32, 1), keras.layers.GlobalAveragePooling2D())
    first = SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(later)
    tuned = pooling(first)
    target = first.target.tvm_target()
    load_tensor_intrinsics("llvm")
    schedule = ms.TuneContext(
        mod=tuned, target=target, space_generator="post-order-apply", num_threads=1
    ).generate_design_space()[0]
    database = RecordDatabase(open_records(store), target, run_id="earlier")
    database.commit_workload(tuned)
    database.commit_tuning_record(
        ms.database.TuningRecord(
            schedule.trace,
            ms.database.Workload(tuned),
            [1e-6],
            target,
            ms.arg_info.ArgInfo.from_prim_func(tuned["main"]),
        )
    )

    second = SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(
        saved("first", keras.layers.GlobalAveragePooling2D())
    )
    assert block_names(pooling(second)) != block_names(tuned)
    second.build()
    build = next(s for s in reversed(second.context.steps) if s["step"] == "build")
    assert build["tasks_with_records"] == build["tasks"] == 1
    image = np.random.default_rng(0).standard_normal((1, 4, 4, 32)).astype("float32")
    np.testing.assert_allclose(second.run(image), image.mean(axis=(1, 2)), rtol=1e-5, atol=1e-6)
