"""The loop on real threads: stage order, arrivals while running, and faults."""

from __future__ import annotations

import threading

import pytest
from scheduler_helpers import by_job

from scheduler import (
    Failure,
    FailureCause,
    InProcessBackend,
    Job,
    Policy,
    Scheduler,
    Stage,
    StageResult,
    Start,
    State,
    client,
    devices,
)
from scheduler.testing import MockJob


def threads(
    policy: str | Policy = "round-robin", device_count: int = 2, **kwargs: int
) -> Scheduler:
    return Scheduler(
        [client(), *devices("default", device_count)], policy, InProcessBackend(), **kwargs
    )


@pytest.mark.parametrize("policy", ["round-robin", "sequential", "predictive", "synchronous"])
def test_every_policy_completes_every_job_on_threads(policy: str) -> None:
    jobs = [MockJob(f"j{i}", tasks=2, iterations=2, durations=0.0005) for i in range(4)]
    with threads(policy) as scheduler:
        for job in jobs:
            scheduler.submit(job)
        trace = scheduler.run()
    assert trace.failed == {} and set(trace.jobs) == {"j0", "j1", "j2", "j3"}
    assert len(trace.records) == 4 * 16
    assert trace.exclusive == (policy != "synchronous")
    if trace.exclusive:
        assert trace.overlaps() == []
    for job in jobs:  # the job ran every stage, in order, where the scheduler said
        recorded = by_job(trace)[job.job_id]
        assert len(job.history) == job.total_stages
        assert [(s.task, s.iteration, s.name, name) for s, name in job.history] == [
            (r.task, r.iteration, r.stage, r.resource) for r in recorded
        ]


class Spawner(MockJob):
    """A job whose first stage submits another job to the running scheduler."""

    def __init__(self, scheduler: Scheduler, late: MockJob) -> None:
        super().__init__("spawner", iterations=3, durations=0.002)
        self.scheduler, self.late = scheduler, late

    def run_stage(self, stage: Stage, resource_name: str) -> StageResult:
        if stage.iteration == 0 and stage.name == "select":
            self.scheduler.submit(self.late)
        return super().run_stage(stage, resource_name)


def test_a_job_submitted_while_running_is_scheduled() -> None:
    with threads() as scheduler:
        late = MockJob("late", iterations=2, durations=0.002)
        scheduler.submit(Spawner(scheduler, late))
        trace = scheduler.run()
    assert trace.failed == {}
    assert trace.jobs["late"].status == "done" and len(late.history) == 8
    spawner_end = max(r.end for r in trace.records if r.job == "spawner")
    assert min(r.start for r in trace.records if r.job == "late") < spawner_end


def test_run_can_be_called_again_for_later_jobs() -> None:
    with threads() as scheduler:
        assert scheduler.run().records == []
        scheduler.submit(MockJob("a"))
        assert scheduler.run().jobs["a"].status == "done"
        scheduler.submit(MockJob("b"))
        trace = scheduler.run()
    assert list(trace.jobs) == ["b"]
    with pytest.raises(ValueError, match="duplicate job id 'a'"):
        scheduler.submit(MockJob("a"))


class Reporting(MockJob):
    """Reports a failed build as data instead of raising."""

    def run_stage(self, stage: Stage, resource_name: str) -> StageResult:
        if stage.name == "build":
            return StageResult("error", "all candidates failed to compile")
        return super().run_stage(stage, resource_name)


class Unstartable(Job):
    job_id = "unstartable"  # type: ignore[assignment]

    def next_stage(self) -> Stage | None:
        raise OSError("model file not found")

    def run_stage(self, stage: Stage, resource_name: str) -> StageResult:
        raise AssertionError("never started")


def broken_factory() -> Job:
    raise ImportError("no module named tvm")


def test_failures_are_data_and_the_others_finish() -> None:
    with threads(device_count=1) as scheduler:
        scheduler.submit(
            MockJob("raises", iterations=2, durations=0.001, fail_at={(0, 0, "profile")})
        )
        scheduler.submit(Reporting("reports", durations=0.001))
        scheduler.submit(Unstartable())
        scheduler.submit(broken_factory, job_id="factory")
        scheduler.submit(MockJob("fine", iterations=2, durations=0.001))
        trace = scheduler.run()
    assert trace.failed == {
        "raises": "profile on default0: RuntimeError: injected failure in profile of task 0 iteration 0",
        "reports": "build on client: all candidates failed to compile",
        "unstartable": "could not start: OSError: model file not found",
        "factory": "could not start: ImportError: no module named tvm",
    }
    assert trace.jobs["fine"].status == "done"
    assert [r.resource for r in trace.records if r.job == "fine" and r.stage == "profile"] == [
        "default0"
    ] * 2


def test_a_failure_carries_its_stage_resource_cause_and_message_as_fields() -> None:
    """What a caller reads of a failed job, without taking its one-line text apart."""
    with threads(device_count=1) as scheduler:
        scheduler.submit(MockJob("raises", fail_at={(0, 0, "profile")}))
        scheduler.submit(Reporting("reports"))
        scheduler.submit(broken_factory, job_id="factory")
        trace = scheduler.run()
    failures = {job: outcome.failure for job, outcome in trace.jobs.items()}
    assert failures == {
        "raises": Failure(
            "profile",
            "default0",
            FailureCause.STAGE,
            "RuntimeError: injected failure in profile of task 0 iteration 0",
        ),
        "reports": Failure(
            "build", "client", FailureCause.STAGE, "all candidates failed to compile"
        ),
        "factory": Failure(None, None, FailureCause.START, "ImportError: no module named tvm"),
    }
    assert scheduler.state.jobs["reports"].failure == failures["reports"]
    assert {r.job: r.error for r in trace.records if r.status == "error"} == {
        "raises": "RuntimeError: injected failure in profile of task 0 iteration 0",
        "reports": "all candidates failed to compile",
    }


def test_crash_at_refuses_to_kill_the_scheduler_process() -> None:
    with threads() as scheduler:
        scheduler.submit(MockJob("crash", crash_at=(0, 0, "select")))
        trace = scheduler.run()
    assert "crash_at needs a worker process" in trace.failed["crash"]


class Idle(Policy):
    name = "idle"

    def decide(self, state: State) -> list[Start]:
        return []


class Greedy(Policy):
    name = "greedy"

    def decide(self, state: State) -> list[Start]:
        return [
            Start(r.job_id, r.stage, "default0") for r in state.ready("device:default") if r.stage
        ]


def test_a_policy_that_stalls_or_double_books_is_a_bug_not_a_job_failure() -> None:
    with threads(Idle()) as scheduler:
        scheduler.submit(MockJob("a"))
        with pytest.raises(RuntimeError, match="policy 'idle' started nothing while jobs wait: a"):
            scheduler.run()
    with threads(Greedy()) as scheduler:
        scheduler.submit(MockJob("a", stage_names=("profile",)))
        scheduler.submit(MockJob("b", stage_names=("profile",)))
        with pytest.raises(ValueError, match="'default0' is busy"):
            scheduler.run()


def test_resources_are_validated() -> None:
    from scheduler import Resource, device

    with pytest.raises(ValueError, match="must have capacity 1"):
        Resource("gpu0", "device:gpu", capacity=2)
    with pytest.raises(ValueError, match="duplicate resource name 'gpu0'"):
        Scheduler([device("gpu0"), device("gpu0")], backend="threads")
    with pytest.raises(
        ValueError, match="unknown backend 'dask'; valid names: processes, ray, threads"
    ):
        Scheduler([client()], backend="dask")


def test_a_waiting_scheduler_acts_on_a_signal_another_thread_received() -> None:
    """Linux may hand Ctrl-C to any thread; the waiting main thread must act on it while
    the stage it waits for still runs (this one ends after 5 s, long after the signal)."""
    import signal
    from concurrent.futures import Future

    class Interrupted(Exception):
        pass

    def interrupt(*_) -> None:
        raise Interrupted

    stage_end: Future = Future()
    ends = threading.Timer(5.0, stage_end.set_result, (None,))
    sender = threading.Timer(
        0.3, lambda: signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)
    )
    previous = signal.signal(signal.SIGUSR1, interrupt)
    try:
        ends.start()
        sender.start()  # the timer's own thread receives the signal, not the main one
        with pytest.raises(Interrupted):
            InProcessBackend().wait([stage_end])
        assert not stage_end.done()
    finally:
        sender.join()
        ends.cancel()
        signal.signal(signal.SIGUSR1, previous)


class IdleWatchingBackend(InProcessBackend):
    """Threads that also tell when the loop waits with nothing in flight: a wait on one
    future alone, the loop's wake-up."""

    def __init__(self) -> None:
        super().__init__()
        self.idle = threading.Event()

    def wait(self, futures):
        futures = list(futures)
        if len(futures) == 1:
            self.idle.set()
        return super().wait(futures)


def test_a_serving_loop_waits_idle_for_jobs_and_ends_on_stop() -> None:
    backend = IdleWatchingBackend()
    ended: list[str] = []
    ends = {"first": threading.Event(), "later": threading.Event()}

    def on_job_end(job_id: str, _) -> None:
        ended.append(job_id)
        ends[job_id].set()

    with Scheduler([client(), *devices("default", 2)], "round-robin", backend) as scheduler:
        result: dict = {}
        loop = threading.Thread(
            target=lambda: result.update(trace=scheduler.run(on_job_end=on_job_end, serve=True))
        )
        loop.start()
        assert backend.idle.wait(10)  # no job yet: waiting, not returned
        backend.idle.clear()
        scheduler.submit(MockJob("first", tasks=1, iterations=1, durations=0.0005))
        assert ends["first"].wait(10)
        assert backend.idle.wait(10) and loop.is_alive()  # idle again, not returned
        backend.idle.clear()
        scheduler.submit(MockJob("later", tasks=1, iterations=2, durations=0.0005))  # live
        assert ends["later"].wait(10)
        scheduler.stop()
        loop.join(10)
    assert not loop.is_alive() and ended == ["first", "later"]
    assert set(result["trace"].jobs) == {"first", "later"} and result["trace"].failed == {}
