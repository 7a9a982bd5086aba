"""run() and evaluate() on an RPC server of the device key, not in this process."""

from __future__ import annotations

import resource
import time

import numpy as np
import psutil
import pytest
from model_factories import make_tiny_cnn_onnx

from simpletvm import BenchmarkingContext, SimpleTVM, SimpleTVMError
from simpletvm.remote.rpc import LocalRPC, wait_for_servers

KEY = "eval-device"


@pytest.fixture(scope="module")
def rpc():
    with LocalRPC([KEY], servers=1) as local:
        yield local


@pytest.fixture(scope="module")
def model_64(tmp_path_factory):
    """The tiny CNN at 64x64: 0.9-8 ms per untuned inference by host, enough CPU to see
    in 1000 runs."""
    return make_tiny_cnn_onnx(tmp_path_factory.mktemp("onnx") / "tiny64.onnx", image_size=64)


def remote(store, rpc, **context) -> SimpleTVM:
    ctx = BenchmarkingContext("cpu", device_key=KEY, store=store, **context)
    return SimpleTVM(ctx, rpc_tracker=rpc.address)


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def child_cpu_seconds() -> dict[int, float]:
    """CPU time of each process this test process started (the tracker and server among
    them), with the session processes they have reaped (a server serves each session in
    a child process)."""
    spent = {}
    for process in psutil.Process().children(recursive=True):
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        spent[process.pid] = times.user + times.system + times.children_user + times.children_system
    return spent


def cpu_spent_since(before: dict[int, float]) -> float:
    """CPU time the child processes spent since ``before``; a process that exited in
    between (a worker of an earlier test) drops out instead of subtracting its past."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in child_cpu_seconds().items())


def timed_seconds(stvm: SimpleTVM) -> float:
    """Wall time of the last evaluation's timed runs."""
    evaluation = stvm.last_evaluation
    return evaluation["mean_ms"] * evaluation["count"] / 1e3


def test_evaluate_times_the_model_in_the_servers_process(rpc, store, model_64):
    """The same evaluation costs this process its CPU time when local, and the server's
    process when remote (the server spent about 0.6 of the local CPU time here, hence
    the bound of a quarter). CPU time is compared with CPU time, never with wall time:
    on a busy machine the timed runs' wall time grows while the CPU they get does not."""
    local = SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(model_64)
    local.build(records=None)
    before = own_cpu_seconds()
    local.evaluate(repeat=1000, warmup=2)
    work = own_cpu_seconds() - before
    assert work > 0.1 and timed_seconds(local) > 0.1

    stvm = remote(store, rpc).from_model(model_64).build(records=None).save()
    servers_before, own_before = child_cpu_seconds(), own_cpu_seconds()
    stvm.evaluate(repeat=1000, warmup=2)
    own = own_cpu_seconds() - own_before
    deadline = time.monotonic() + 30
    while (spent := cpu_spent_since(servers_before)) < 0.25 * work:  # reaped after the session
        assert time.monotonic() < deadline, (
            f"the servers spent {spent:.2f} s of CPU on what took {work:.2f} s here"
        )
        time.sleep(0.2)
    assert own < 0.25 * spent, f"this process spent {own:.2f} s of CPU, the servers {spent:.2f} s"
    where = stvm.context.evaluation["device"]
    assert where == {
        "runner": "rpc",
        "rpc_tracker": list(rpc.address),
        "device_key": KEY,
        "server": [where["server"][0], rpc.server_handles[0].port],
    }
    assert stvm.context.steps[-1]["device"] == where
    assert local.context.evaluation["device"] == {"runner": "local"}
    wait_for_servers(*rpc.address, KEY, 1)  # the session ended with the call


def test_run_on_the_server_matches_this_machine(rpc, store, tiny_onnx):
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype("float32")
    local = SimpleTVM(BenchmarkingContext("cpu", store=store)).from_model(tiny_onnx)
    expected = local.build(records=None).run(x)
    stvm = remote(store, rpc).from_model(tiny_onnx).build(records=None)  # exported by run()
    np.testing.assert_allclose(stvm.run(x), expected, rtol=1e-5, atol=1e-6)
    assert stvm.context.steps[-1]["device"]["runner"] == "rpc"
    assert local.context.steps[-1]["device"] == {"runner": "local"}


def test_a_loaded_module_is_evaluated_on_the_server(rpc, store, tiny_onnx):
    saved = remote(store, rpc).from_model(tiny_onnx).build(records=None).save()
    stvm = remote(store, rpc).load(saved.context.run_id).evaluate(repeat=3, warmup=0)
    assert stvm.last_evaluation["device"]["server"][1] == rpc.server_handles[0].port
    assert stvm.last_evaluation["count"] == 3


def test_evaluate_without_a_server_of_the_key_says_how_to_start_one(rpc, store, tiny_onnx):
    ctx = BenchmarkingContext("cpu", device_key="no-such-device", store=store)
    stvm = SimpleTVM(ctx, rpc_tracker=rpc.address).from_model(tiny_onnx).build(records=None)
    with pytest.raises(SimpleTVMError, match="no RPC server with device key 'no-such-device'"):
        stvm.evaluate(repeat=1)
    assert ctx.steps[-1]["step"] == "evaluate" and ctx.steps[-1]["status"] == "error"
