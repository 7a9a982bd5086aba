"""The process backend with real worker processes, one of them killed mid-stage."""

from __future__ import annotations

import functools
import os
import threading
import time

from scheduler import Failure, FailureCause, ProcessBackend, Scheduler, client, devices
from scheduler.testing import MockJob


def test_jobs_built_in_their_own_worker_processes() -> None:
    with Scheduler(
        [client(), *devices("default", 2)], "round-robin", ProcessBackend()
    ) as scheduler:
        scheduler.submit(
            functools.partial(MockJob, "built-there", iterations=2, durations=0.001),
            job_id="built-there",
        )
        given = MockJob("pickled", iterations=2, durations=0.001)
        scheduler.submit(given)
        scheduler.submit(MockJob("unpicklable", durations=lambda stage: 0.001))
        trace = scheduler.run()
    assert {j: o.status for j, o in trace.jobs.items()} == {
        "built-there": "done",
        "pickled": "done",
        "unpicklable": "failed",
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
    assert trace.jobs["crash"].failure == Failure(
        "profile", "default0", FailureCause.WORKER, "killed by SIGKILL"
    )


def test_a_cancelled_job_fails_with_its_reason_wherever_it_was() -> None:
    """Two jobs for one device: the one that got it is stopped mid-stage, the other is
    cancelled while it waits. Either way the reason is the message."""
    with Scheduler([client(), *devices("default", 1)], "round-robin", "processes") as scheduler:
        for job in ("a", "b"):
            scheduler.submit(MockJob(job, stage_names=("profile",), durations=30.0))

        def cancel_once_one_runs_and_one_waits() -> None:
            while not (scheduler.state.running and len(scheduler.state.jobs) == 2):
                time.sleep(0.01)
            for job in ("a", "b"):
                scheduler.cancel(job, f"{job} took too long")

        canceller = threading.Thread(target=cancel_once_one_runs_and_one_waits, daemon=True)
        canceller.start()
        trace = scheduler.run()
    (started,) = [r.job for r in trace.records]
    (waited,) = {"a", "b"} - {started}
    assert trace.jobs[started].failure == Failure(
        "profile", "default0", FailureCause.CANCELLED, f"{started} took too long"
    )
    assert trace.jobs[waited].failure == Failure(
        "profile", None, FailureCause.CANCELLED, f"{waited} took too long"
    )
    assert trace.failed == {"a": "a took too long", "b": "b took too long"}


def test_a_released_job_is_closed_in_its_worker_process(tmp_path) -> None:
    """A worker leaves through os._exit, which deletes nothing a job holds: the backend
    closes each job in its process first; a killed one is not (its files are swept)."""
    markers = {name: tmp_path / f"{name}.closed" for name in ("done", "failed", "killed")}
    with Scheduler([client(), *devices("default", 1)], "round-robin", "processes") as scheduler:
        scheduler.submit(MockJob("done", durations=0.001, closed_marker=markers["done"]))
        scheduler.submit(
            MockJob(
                "failed",
                durations=0.001,
                fail_at=[(0, 0, "build")],
                closed_marker=markers["failed"],
            )
        )
        scheduler.submit(
            MockJob(
                "killed",
                durations=0.02,
                crash_at=(0, 0, "profile"),
                closed_marker=markers["killed"],
            )
        )
        trace = scheduler.run()
    assert {j: o.status for j, o in trace.jobs.items()} == {
        "done": "done",
        "failed": "failed",
        "killed": "failed",
    }
    closed_in = {name: int(path.read_text()) for name, path in markers.items() if path.exists()}
    assert set(closed_in) == {"done", "failed"}
    assert os.getpid() not in closed_in.values()


def test_the_threads_backend_closes_released_jobs(tmp_path) -> None:
    marker = tmp_path / "closed"
    with Scheduler([client(), *devices("default", 1)], "round-robin", "threads") as scheduler:
        scheduler.submit(MockJob("done", durations=0.001, closed_marker=marker))
        scheduler.run()
    assert int(marker.read_text()) == os.getpid()
