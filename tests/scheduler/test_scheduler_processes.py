"""The process backend with real worker processes, one of them killed mid-stage."""

from __future__ import annotations

import functools

from scheduler import ProcessBackend, Scheduler, client, devices
from scheduler.testing import MockJob


def test_jobs_built_in_their_own_worker_processes() -> None:
    with Scheduler([client(), *devices("default", 2)], "round-robin", ProcessBackend()) as scheduler:
        scheduler.submit(functools.partial(MockJob, "built-there", iterations=2, durations=0.001), job_id="built-there")
        given = MockJob("pickled", iterations=2, durations=0.001)
        scheduler.submit(given)
        scheduler.submit(MockJob("unpicklable", durations=lambda stage: 0.001))
        trace = scheduler.run()
    assert {j: o.status for j, o in trace.jobs.items()} == {
        "built-there": "done", "pickled": "done", "unpicklable": "failed",
    }
    assert "could not start" in trace.failed["unpicklable"]
    assert len([r for r in trace.records if r.status == "ok"]) == 16
    assert given.history == []  # the stages ran on a copy inside the worker
    assert trace.overlaps() == []


def test_a_killed_worker_fails_its_job_and_frees_the_device() -> None:
    """The crashing job SIGKILLs its own process halfway through its first profile."""
    with Scheduler([client(), *devices("default", 1)], "round-robin", "processes") as scheduler:
        scheduler.submit(MockJob("crash", iterations=2, durations=0.02, crash_at=(0, 0, "profile")))
        for i in range(2):
            scheduler.submit(MockJob(f"ok{i}", iterations=2, durations=0.002))
        trace = scheduler.run()
        assert scheduler.state.pool.running == {"client": 0, "default0": 0}
    assert list(trace.failed) == ["crash"]
    assert trace.failed["crash"] == "profile on default0: worker process died (killed by SIGKILL)"
    assert [r.stage for r in trace.records if r.job == "crash"] == ["select", "build", "profile"]
    assert trace.jobs["ok0"].status == trace.jobs["ok1"].status == "done"
    assert [r.status for r in trace.records if r.resource == "default0"].count("ok") == 4
    assert trace.retired == {} and trace.overlaps() == []
