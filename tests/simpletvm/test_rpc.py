"""Profiling through TVM's RPC tracker and servers on 127.0.0.1, started by the project."""

from __future__ import annotations

import pytest

from simpletvm import BenchmarkingContext, SimpleTVM, SimpleTVMError
from simpletvm.remote.rpc import DeviceGrant, LocalRPC, device_keys, free_servers, tracker_summary

FAST = {
    "trials": 4,
    "candidates_per_iteration": 4,
    "population": 32,
    "genetic_iterations": 1,
    "seed": 0,
    "remeasure": 1,
}  # the closing round profiles through the tracker too


@pytest.fixture(scope="module")
def rpc():
    with LocalRPC(["test-device"], servers=2) as local:
        yield local


def test_local_rpc_registers_its_servers(rpc):
    host, port = rpc.address
    assert host == "127.0.0.1" and 9190 <= port <= 9199
    assert free_servers(host, port, "test-device") == 2
    assert len(tracker_summary(host, port)["server_info"]) == 2


def test_a_granted_device_is_its_own_server_or_any_server_of_its_key():
    assert device_keys("rpi4", 2) == ["rpi4.0", "rpi4.1"]
    grant = DeviceGrant("rpi4")
    assert grant.server_key == "rpi4"  # alone: any free server of the key
    grant.grant("rpi4.1")
    assert grant.server_key == "rpi4.1"  # a device with a server of its own
    grant.grant("rpi40")  # scheduler.devices("rpi4", n) names: the key's servers, as before
    assert grant.server_key == "rpi4"


@pytest.mark.slow
def test_autotune_profiles_on_the_named_trackers_devices(rpc, store, tiny_onnx):
    ctx = BenchmarkingContext("cpu", device_key="test-device", store=store)
    stvm = SimpleTVM(ctx, rpc_tracker=rpc.address).from_model(tiny_onnx)
    stvm.autotune(**FAST)
    profiles = [s for s in ctx.stages if s["stage"] == "profile"]
    assert profiles and {s["resource"] for s in profiles} == {"device:test-device"}
    assert stvm.tuning_summary["errors"] == 0 and stvm.tuning_summary["trials"] >= 5
    assert ctx.tuning["rpc_tracker"] == list(rpc.address)
    # the servers are handed back to the tracker after the job
    assert free_servers(*rpc.address, "test-device") == 2


def test_tracker_without_a_server_of_the_key_says_how_to_start_one(rpc, store, tiny_onnx):
    ctx = BenchmarkingContext("cpu", device_key="no-such-device", store=store)
    stvm = SimpleTVM(ctx, rpc_tracker=rpc.address).from_model(tiny_onnx)
    with pytest.raises(
        SimpleTVMError, match="no RPC server with device key 'no-such-device'.*rpc_server --tracker"
    ):
        stvm.autotune(**FAST)


def test_unreachable_tracker_is_a_clear_error(store, tiny_onnx):
    ctx = BenchmarkingContext("cpu", device_key="x", store=store)
    stvm = SimpleTVM(ctx, rpc_tracker=("127.0.0.1", 1)).from_model(tiny_onnx)
    with pytest.raises(SimpleTVMError, match="cannot reach the RPC tracker at 127.0.0.1:1"):
        stvm.autotune(**FAST)
    assert ctx.steps[-1]["status"] == "error"


@pytest.mark.slow
def test_a_dead_server_fails_the_profile_stage_which_reruns_on_a_new_server(store, tiny_onnx):
    import time
    from functools import partial

    from simpletvm.remote.rpc import registered_servers, require_servers, wait_for_servers
    from simpletvm.remote.runner import rpc_runner
    from simpletvm.tuning import RecordStore, TuningJob, TuningOptions

    with LocalRPC(["flaky"], servers=1) as local:
        ctx = BenchmarkingContext("cpu", device_key="flaky", store=store)
        stvm = SimpleTVM(ctx, rpc_tracker=local.address).from_model(tiny_onnx)
        options = TuningOptions(**FAST)
        job = TuningJob(
            stvm.fused_module,
            stvm.target,
            options,
            records=RecordStore(tmp_records := store / "records.sqlite"),
            runner=rpc_runner(options, stvm.target.device_type, local.address, "flaky"),
            device_resource="device:flaky",
            device_check=partial(require_servers, *local.address, "flaky"),
        )
        while job.next_stage().kind != "profile":
            job.run_stage()
        local.server_handles[0].terminate()
        deadline = time.monotonic() + 30
        while registered_servers(*local.address, "flaky"):
            assert time.monotonic() < deadline
            time.sleep(0.1)
        with pytest.raises(SimpleTVMError, match="no RPC server with device key 'flaky'"):
            job.run_stage()
        assert job.next_stage().kind == "profile"  # nothing lost: the stage can run again
        local.add_server("flaky")
        wait_for_servers(*local.address, "flaky", 1)
        job.run()
        assert job.is_complete() and job.summary()["errors"] == 0
        assert len(RecordStore(tmp_records)) == job.trials > 0
