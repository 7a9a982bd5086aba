"""The fluent flow: prerequisites enforced, inputs checked, save/load round trips."""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest

from simpletvm import (
    BenchmarkingContext,
    FlowError,
    IncompatibleModuleError,
    RunNotFoundError,
    SimpleTVM,
    SimpleTVMError,
)
from simpletvm.api import METADATA_FILE


@pytest.fixture
def built(store, tiny_onnx):
    return (
        SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(tiny_onnx).build(records=None)
    )


def fresh(store) -> SimpleTVM:
    return SimpleTVM(BenchmarkingContext("cpu", store=store))


@pytest.mark.parametrize(
    "call,missing",
    [
        (lambda s: s.autotune(), "autotune\\(\\) needs a model: call from_model\\(\\) first"),
        (lambda s: s.build(), "build\\(\\) needs a model: call from_model\\(\\) first"),
        (lambda s: s.save(), "save\\(\\) needs a built module: call build\\(\\) first"),
        (lambda s: s.run(np.zeros(1)), "run\\(\\) needs a module: call build\\(\\) or load\\(\\)"),
        (lambda s: s.evaluate(), "evaluate\\(\\) needs a module: call build\\(\\) or load\\(\\)"),
    ],
)
def test_steps_before_their_prerequisites_say_which_call_is_missing(store, call, missing):
    with pytest.raises(FlowError, match=missing):
        call(fresh(store))


def test_a_loaded_module_cannot_be_rebuilt_or_retuned_and_keeps_its_provenance(
    built, store, tiny_onnx
):
    built.save()
    # from_model(A).load(B): B is what this SimpleTVM holds now, and B is compiled
    loaded = fresh(store).from_model(tiny_onnx).load(built.context.run_id)
    assert loaded.state == "loaded"
    for step in (loaded.build, loaded.autotune):
        with pytest.raises(FlowError, match=r"loaded with load\(\).*call from_model\(\)"):
            step()
    with pytest.raises(FlowError, match="a loaded module is saved already"):
        loaded.save()
    assert loaded.evaluate(repeat=3).last_evaluation["tuned"] is False  # built untuned
    metadata_path = store / "modules" / built.context.run_id / METADATA_FILE
    metadata = json.loads(metadata_path.read_text())
    metadata_path.write_text(json.dumps({**metadata, "records": "run"}))
    retuned = fresh(store).load(built.context.run_id).evaluate(repeat=3).last_evaluation
    assert retuned["tuned"] is True and retuned["records"] == "run"
    # importing again starts the flow over
    assert loaded.from_model(tiny_onnx).state == "imported" and loaded.build().state == "built"


def test_save_after_import_without_build_is_refused(store, tiny_onnx):
    with pytest.raises(FlowError, match="call build\\(\\) first"):
        fresh(store).from_model(tiny_onnx).save()


def test_run_checks_shapes_and_names(built):
    with pytest.raises(ValueError, match="must have shape \\(1, 3, 32, 32\\)"):
        built.run(np.zeros((1, 3, 16, 16), "float32"))
    with pytest.raises(ValueError, match="missing inputs \\['x'\\]"):
        built.run({"image": np.zeros((1, 3, 32, 32), "float32")})
    with pytest.raises(ValueError, match="got 2 inputs"):
        built.run([np.zeros((1, 3, 32, 32), "float32")] * 2)
    out = built.run({"x": np.zeros((1, 3, 32, 32), "float32")})
    assert out.shape == (1, 10) and out.dtype == np.float32
    # another dtype is refused, as TFLite and ONNX Runtime refuse it, naming the fix
    with pytest.raises(ValueError, match="'x' must be float32, got float64: .*astype"):
        built.run(np.zeros((1, 3, 32, 32)))


def test_outputs_numpy_cannot_view_still_come_back_as_arrays():
    import ml_dtypes
    import tvm

    from simpletvm.runtime.loaded import as_numpy  # where run() turns every output into an array

    values = np.arange(4, dtype="float32")
    for dtype in (np.float32, np.float16, ml_dtypes.bfloat16):
        source = values.astype(dtype)
        out = as_numpy(tvm.runtime.tensor(source))
        assert out.dtype == source.dtype
        np.testing.assert_array_equal(out.astype("float32"), values)


def test_results_are_not_overwritten_by_later_calls(built):
    """run() and the comparison's runner hand back views of the returned tensors, not
    copies: a kept result must survive the calls after it, on other inputs."""
    from simpletvm.runtime.comparison import simpletvm_runner

    rng = np.random.default_rng(0)
    first_input, other = (rng.standard_normal((1, 3, 32, 32)).astype("float32") for _ in range(2))
    kept = built.run(first_input)
    expected = kept.copy()
    for _ in range(3):
        assert not np.array_equal(built.run(other), expected)
    np.testing.assert_array_equal(kept, expected)

    infer = simpletvm_runner(built, first_input)
    kept = infer()
    np.testing.assert_array_equal(kept, expected)
    first_input[:] = other  # the runner reads its example anew on every call
    for _ in range(3):
        assert not np.array_equal(infer(), expected)
    np.testing.assert_array_equal(kept, expected)


def test_inference_calls_are_tallied_in_one_step_and_logged_once(built):
    """A serving loop's run() calls make one record, counting them, and one log line:
    the steps and the run's log do not grow with every inference."""
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    steps_before = len(built.context.steps)
    for _ in range(7):
        built.run(x)
    (record,) = [s for s in built.context.steps if s["step"] == "run"]
    assert len(built.context.steps) == steps_before + 1
    assert record["calls"] == 7 and record["status"] == "ok"
    assert 0 < record["duration_s"] <= record["end"] - record["start"] + 1e-3
    assert record["device"] == {"runner": "local"}
    log = built.context.store.log_path(built.context.run_id).read_text()
    assert log.count("step run") == 1, log
    assert built.context.step_durations()["run"] == record["duration_s"]


def test_run_ids_are_32_alphanumeric_and_unique(store):
    ids = {BenchmarkingContext(store=store).run_id for _ in range(200)}
    assert len(ids) == 200
    assert all(re.fullmatch(r"[0-9a-z]{32}", run_id) for run_id in ids)


def test_context_json_records_steps_model_and_evaluation(built):
    built.evaluate(repeat=5, warmup=1)
    path = built.context.save()
    data = json.loads(path.read_text())
    assert path == built.store.context_path(built.context.run_id)
    assert data["run_id"] == built.context.run_id
    assert [s["step"] for s in data["steps"]] == ["from_model", "build", "evaluate"]
    assert all(s["end"] >= s["start"] and s["status"] == "ok" for s in data["steps"])
    assert data["model"]["format"] == "onnx"
    assert data["model"]["inputs"] == [{"name": "x", "shape": [1, 3, 32, 32], "dtype": "float32"}]
    assert data["target_spec"]["kind"] == "llvm"
    assert data["host"]["fingerprint"] and data["versions"]["apache-tvm"]
    assert data["parameters"]["evaluate"]["repeat"] == 5
    assert len(data["evaluation"]["samples_ms"]) == 5
    assert built.store.log_path(built.context.run_id).read_text().count("step") >= 6
    loaded = BenchmarkingContext.load(built.context.run_id, store=built.store)
    assert loaded.to_dict() == built.context.to_dict()


def test_failed_step_is_recorded_with_its_error(store):
    stvm = fresh(store)
    with pytest.raises(SimpleTVMError):
        stvm.from_model("/no/such/model.onnx")
    assert stvm.context.steps[-1]["status"] == "error"
    assert "no/such/model.onnx" in stvm.context.steps[-1]["error"]


def test_evaluate_statistics_agree_with_the_samples(built):
    stats = built.evaluate(repeat=30, warmup=2).last_evaluation
    samples = np.asarray(stats["samples_ms"])
    assert stats["count"] == 30 and (samples > 0).all()
    assert stats["mean_ms"] == pytest.approx(samples.mean())
    assert stats["median_ms"] == pytest.approx(np.median(samples))
    assert stats["std_ms"] == pytest.approx(samples.std(ddof=1))
    assert stats["min_ms"] == samples.min() and stats["max_ms"] == samples.max()
    assert stats["min_ms"] <= stats["median_ms"] <= stats["p90_ms"] <= stats["max_ms"]
    assert stats["tuned"] is False
    with pytest.raises(ValueError, match="repeat >= 1"):
        built.evaluate(repeat=0)


def test_save_and_load_round_trip(built, store):
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    expected = built.run(x)
    built.save()
    run_id = built.context.run_id
    module_dir = store / "modules" / run_id
    assert (module_dir / "model.so").exists()
    metadata = json.loads((module_dir / METADATA_FILE).read_text())
    assert metadata["target"]["kind"] == "llvm" and metadata["outputs"][0]["shape"] == [1, 10]
    later = fresh(store).load(run_id)
    np.testing.assert_array_equal(later.run(x), expected)
    assert later.evaluate(repeat=3).last_evaluation["count"] == 3


def test_close_deletes_the_unsaved_export_and_the_session_still_runs_and_saves(store, tiny_onnx):
    def exports() -> set[Path]:
        return set(Path(tempfile.gettempdir()).glob(f"simpletvm-module-{os.getpid()}-*"))

    before = exports()
    session = fresh(store).from_model(tiny_onnx).build(records=None)
    (mine,) = exports() - before
    assert (mine / "model.so").is_file()
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    expected = session.run(x)
    session.close()
    assert not mine.exists()
    np.testing.assert_array_equal(session.run(x), expected)  # the module stays loaded
    session.save()  # exported again, into the store
    assert (store / "modules" / session.context.run_id / "model.so").is_file()
    session.close()  # nothing left to delete


def test_load_unknown_run_names_the_store(store):
    with pytest.raises(RunNotFoundError, match="no saved module for run 'f00'"):
        fresh(store).load("f00")


def test_load_on_another_target_is_a_clear_error(built, store):
    built.save()
    cuda = SimpleTVM(BenchmarkingContext("cuda", store=store))
    with pytest.raises(IncompatibleModuleError, match="built for target 'llvm'.*targets 'cuda'"):
        cuda.load(built.context.run_id)


def test_load_on_another_host_is_a_clear_error(built, store):
    built.save()
    path = store / "modules" / built.context.run_id / METADATA_FILE
    metadata = json.loads(path.read_text())
    metadata["host_fingerprint"] = "0" * 16
    metadata["host"]["cpu_model"] = "Some Other CPU"
    path.write_text(json.dumps(metadata))
    with pytest.raises(IncompatibleModuleError, match="another CPU \\(Some Other CPU"):
        fresh(store).load(built.context.run_id)


def test_build_with_unknown_run_records(built):
    with pytest.raises(RunNotFoundError, match="records='nope'"):
        built.build(records="nope")


def test_unknown_target_and_tracker_without_device_key(store):
    with pytest.raises(SimpleTVMError, match="unknown target 'tpu'"):
        SimpleTVM(BenchmarkingContext("tpu", store=store))
    with pytest.raises(SimpleTVMError, match="device key"):
        SimpleTVM(BenchmarkingContext("cpu", store=store), rpc_tracker=("127.0.0.1", 9190))


def test_the_runtime_uses_the_targets_threads_not_half_the_hardware_threads(tmp_path):
    import subprocess
    import sys

    import psutil

    # TVM alone takes half the hardware threads on x86 (1 of this machine kind's 2)
    script = (
        "from simpletvm import BenchmarkingContext, SimpleTVM\n"
        f"SimpleTVM(BenchmarkingContext('cpu', store={str(tmp_path)!r}))\n"
        "import tvm\nprint(tvm.runtime.num_threads())\n"
    )
    env = {k: v for k, v in __import__("os").environ.items() if k != "TVM_NUM_THREADS"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) == psutil.cpu_count(logical=False)


def test_the_flow_state_moves_only_along_its_steps(store, tiny_onnx):
    from simpletvm import FlowState

    stvm = SimpleTVM(BenchmarkingContext("cpu", store=store))
    assert stvm.state is FlowState.NEW
    with pytest.raises(FlowError, match="build\\(\\) needs a model: call from_model\\(\\) first"):
        stvm.build()
    assert stvm.from_model(tiny_onnx).state is FlowState.IMPORTED
    with pytest.raises(FlowError, match="save\\(\\) needs a built module"):
        stvm.save()
    assert stvm.build(records=None).state is FlowState.BUILT
    assert str(stvm.state) == "built"  # as context.json and messages spell it
