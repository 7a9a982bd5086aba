"""Real TuningJobs interleaved by the scheduler, each in its own worker process."""

from __future__ import annotations

import json

import pytest

from scheduler import Scheduler, client
from scheduler.tuning import TuningJobSpec, rpc_devices
from simpletvm.testing import tiny_cnn_onnx

# real TuningJobs tune the tiny model
pytestmark = pytest.mark.slow

FAST = {
    "trials": 4,
    "candidates_per_iteration": 4,
    "population": 32,
    "genetic_iterations": 1,
    "seed": 0,
    "transfer_learning": False,
    "remeasure": 0,
}  # the closing round: test_tuning*.py


def test_two_tuning_jobs_interleave_and_profile_on_the_server_of_the_granted_board(tmp_path):
    """Two real tuning jobs, two boards of one kind (a server each): the jobs share the
    client and the boards without overlapping on either, and each profile stage is
    measured by the server of the board the scheduler granted it (its session log)."""
    from simpletvm.remote.rpc import LocalRPC

    model = str(tiny_cnn_onnx(tmp_path / "tiny.onnx"))
    store = str(tmp_path / "store")
    with LocalRPC(["boards"], servers=2, key_per_server=True, log_dir=tmp_path / "rpc") as rpc:
        specs = [
            TuningJobSpec(
                f"job{i}",
                model,
                rpc.address,
                "boards",
                store=store,
                run_id=f"{i}" * 32,
                tuning=FAST,
            )
            for i in range(2)
        ]
        with Scheduler([client(), *rpc_devices("boards", 2)], policy="round-robin") as scheduler:
            for spec in specs:
                scheduler.submit(spec)
            trace = scheduler.run()
    assert not trace.failed, {j: o for j, o in trace.jobs.items()}
    assert trace.overlaps() == []
    # the jobs really shared the resources: one job's stage started while the other's ran
    intervals = sorted((r.start, r.end, r.job) for r in trace.records)
    assert any(a[2] != b[2] and b[0] < a[1] for a, b in zip(intervals, intervals[1:]))
    profiles = [r for r in trace.records if r.stage == "profile"]
    assert {r.resource for r in profiles} == {"boards.0", "boards.1"}
    candidates = {}  # (job, task, iteration) of a profile stage -> candidates it measured
    for spec in specs:
        kinds = [r.stage for r in trace.records if r.job == spec.job_id]
        assert kinds[:4] == ["select", "build", "profile", "update"]
        context = json.loads(
            (tmp_path / "store" / "runs" / spec.run_id / "context.json").read_text()
        )
        assert context["tuning"]["trials"] >= 5 and context["tuning"]["errors"] == 0
        candidates.update(
            {
                (spec.job_id, s["task"], s["iteration"]): s["candidates"]
                for s in context["stages"]
                if s["stage"] == "profile"
            }
        )
    # one RPC session per candidate, and one for the stage's warm-up (its first
    # candidate timed twice), on the server of the board each stage was granted
    for board in ("boards.0", "boards.1"):
        sessions = (tmp_path / "rpc" / f"{board}.log").read_text().count("connected from")
        measured = [
            candidates[(r.job, r.task, r.iteration)] for r in profiles if r.resource == board
        ]
        assert sessions == sum(count + 1 for count in measured if count) > 0
