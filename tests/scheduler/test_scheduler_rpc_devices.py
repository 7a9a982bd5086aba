"""Two devices of one kind, each an RPC server under a key of its own: every profile stage
is measured by the server of the device resource the scheduler granted it, as the
servers' own logs show."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from scheduler import Job, Scheduler, Stage, StageResult, StageStatus, client, device_role
from scheduler.tuning import rpc_devices
from simpletvm import SimpleTVMError
from simpletvm.remote.rpc import DeviceGrant, LocalRPC, registered_servers
from simpletvm.remote.runner import DeviceRunner

KIND = "board"


@pytest.fixture
def boards(tmp_path):
    with LocalRPC([KIND], servers=2, key_per_server=True, log_dir=tmp_path / "rpc") as rpc:
        yield rpc


@pytest.fixture(scope="module")
def candidate(tmp_path_factory):
    """A compiled vector add, as the build stage leaves a candidate: a tar to upload."""
    import tvm
    from tvm import te
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.support.tar import tar

    a = te.placeholder((64,), "float32", name="a")
    add_one = te.create_prim_func([a, te.compute((64,), lambda i: a[i] + 1.0, name="b")])

    path = tmp_path_factory.mktemp("candidate") / "candidate.tar"
    tvm.compile(
        tvm.IRModule({"main": add_one.with_attr("global_symbol", "main")}), target="llvm"
    ).export_library(str(path), fcompile=tar)
    return path, ArgInfo.from_prim_func(add_one)


def rpc_runner(tracker, key: str):
    from tvm.s_tir import meta_schedule as ms

    return ms.runner.RPCRunner(
        rpc_config=ms.runner.RPCConfig(
            tracker_host=tracker[0],
            tracker_port=tracker[1],
            tracker_key=key,
            session_timeout_sec=30,
        ),
        evaluator_config=ms.runner.EvaluatorConfig(number=1, repeat=1, min_repeat_ms=0),
    )


class ProfilingJob(Job):
    """Profile stages only, each measuring one candidate named ``<job>-<iteration>.tar``
    with the DeviceRunner a TuningJob gets, pointed the way the adapters point it."""

    def __init__(self, job_id: str, tracker, candidate, directory: Path, stages: int) -> None:
        self._job_id = job_id
        self.device = DeviceGrant(KIND)
        self.runner = DeviceRunner(tracker, self.device, lambda key: rpc_runner(tracker, key))
        self.candidate, self.directory = candidate, directory
        self.stages = [Stage("profile", device_role(KIND), 0, i) for i in range(stages)]

    @property
    def job_id(self) -> str:
        return self._job_id

    def next_stage(self) -> Stage | None:
        return self.stages[0] if self.stages else None

    def run_stage(self, stage: Stage, resource_name: str) -> StageResult:
        from tvm.s_tir.meta_schedule.runner import RunnerInput

        self.device.grant(resource_name)
        self.runner.require_device()
        artifact, args_info = self.candidate
        named = self.directory / f"{self.job_id}-{stage.iteration}.tar"
        shutil.copy(artifact, named)
        (future,) = self.runner.run([RunnerInput(str(named), "cpu", args_info)])
        result = future.result()
        if result.error_msg:
            return StageResult(StageStatus.ERROR, result.error_msg)
        self.stages.pop(0)
        return StageResult()


def test_each_profile_runs_on_the_server_of_the_device_it_was_granted(boards, candidate, tmp_path):
    jobs = [
        ProfilingJob(f"job{i}", boards.address, candidate, tmp_path, stages=3) for i in range(2)
    ]
    with Scheduler([client(), *rpc_devices(KIND, 2)], "round-robin", "threads") as scheduler:
        for job in jobs:
            scheduler.submit(job)
        trace = scheduler.run()
    assert not trace.failed, trace.jobs
    assert trace.overlaps() == []
    profiles = [r for r in trace.records if r.stage == "profile"]
    assert len(profiles) == 6 and {r.resource for r in profiles} == {"board.0", "board.1"}
    logs = {key: (tmp_path / "rpc" / f"{key}.log").read_text() for key in ("board.0", "board.1")}
    for record in profiles:
        loaded = f"{record.job}-{record.iteration}.tar"
        others = [key for key in logs if key != record.resource]
        assert loaded in logs[record.resource], (record, logs)
        assert not any(loaded in logs[key] for key in others), (record, logs)
    # one session per measured candidate, and each log is its own server's (its port)
    for key, text in logs.items():
        assert text.count("connected from") == sum(r.resource == key for r in profiles)
        assert f":{boards.server_of(key).port}" in text


def test_a_granted_device_whose_server_died_is_a_clear_error(boards, candidate, tmp_path):
    boards.server_of("board.1").terminate()
    deadline = time.monotonic() + 30
    while registered_servers(*boards.address, "board.1"):
        assert time.monotonic() < deadline, "the tracker still lists the stopped server"
        time.sleep(0.1)
    job = ProfilingJob("job", boards.address, candidate, tmp_path, stages=1)
    with Scheduler([client(), *rpc_devices(KIND, 2)[1:]], "round-robin", "threads") as scheduler:
        scheduler.submit(job)
        trace = scheduler.run()
    (record,) = trace.records
    assert record.resource == "board.1" and record.status == StageStatus.ERROR
    host, port = boards.address
    assert (
        f"no RPC server with device key 'board.1' is registered at {host}:{port}" in record.error
    ), record.error
    assert f"--tracker {host}:{port} --key board.1" in record.error
    with pytest.raises(SimpleTVMError, match="'board.1'"):
        job.runner.require_device()
