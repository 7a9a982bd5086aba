"""Discrete-event simulation: the real loop and policies, with simulated time.

The :class:`SimulatedBackend` plugs into :class:`~scheduler.loop.Scheduler` like any
backend, but its futures complete in simulated time: ``wait`` jumps the fake clock to
the next stage end (or job arrival). So a simulation exercises exactly the code that
schedules real jobs, and an hour of tuning takes milliseconds.

Stages beyond a resource's capacity (only the synchronous policy starts them) share it
by time slicing: n stages on a capacity-c resource each progress at c/n speed. That
models the slowdown of interference, not the distorted measurements it also causes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Protocol, cast

from scheduler.backends.base import Backend, StageOutcome, first_stage
from scheduler.base import Job, JobFactory, Resource, Stage, StageResult
from scheduler.loop import Scheduler
from scheduler.policies import Policy
from scheduler.testing import FakeClock
from scheduler.trace import Trace

_EPSILON = 1e-9


class SimulatedJob(Protocol):
    """What the simulator needs beyond :class:`~scheduler.base.Job` (``MockJob`` has it)."""

    def duration(self, stage: Stage) -> float: ...

    def complete_stage(self, stage: Stage, resource_name: str) -> StageResult: ...


@dataclass
class _Running:
    future: Future
    job: Job
    stage: Stage
    resource: str
    remaining: float


class SimulatedBackend(Backend):
    """Completes stages at simulated times on a :class:`FakeClock`.

    ``arrivals`` maps job ids to the simulated time they appear; others appear at once.
    """

    name = "simulated"

    def __init__(
        self, resources: Iterable[Resource], arrivals: Mapping[str, float] | None = None
    ) -> None:
        self.clock = FakeClock()
        self._capacity = {r.name: r.capacity for r in resources}
        self._arrivals = dict(arrivals or {})
        self._jobs: dict[str, Job] = {}
        self._pending_arrivals: list[tuple[float, str, Future]] = []
        self._running: dict[str, list[_Running]] = {}

    def now(self) -> float:
        return self.clock.now()

    def add_job(self, job_id: str, job: Job | JobFactory) -> Future[Stage | None]:
        built = job if isinstance(job, Job) else job()
        self._jobs[job_id] = built
        future: Future[Stage | None] = Future()
        at = self._arrivals.get(job_id, self.clock.now())
        if at <= self.clock.now():
            future.set_result(first_stage(built))
        else:
            self._pending_arrivals.append((at, job_id, future))
        return future

    def run_stage(self, job_id: str, stage: Stage, resource: Resource) -> Future[StageOutcome]:
        job = self._jobs[job_id]
        future: Future[StageOutcome] = Future()
        duration = cast(SimulatedJob, job).duration(stage)
        self._running.setdefault(resource.name, []).append(
            _Running(future, job, stage, resource.name, duration)
        )
        return future

    def release(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)

    def close(self) -> None:
        self._jobs.clear()

    def wait(self, futures: Iterable[Future]) -> set[Future]:
        """Advance the clock to the next completion and return what completed then."""
        futures = list(futures)
        done = {f for f in futures if f.done()}
        if done:
            return done
        now = self.clock.now()
        rates = {
            name: min(1.0, self._capacity[name] / len(items))
            for name, items in self._running.items()
            if items
        }
        candidates = [
            now + item.remaining / rates[name]
            for name, items in self._running.items()
            for item in items
        ]
        candidates += [at for at, _, _ in self._pending_arrivals]
        if not candidates:
            raise RuntimeError("simulation has nothing left to wait for")
        at = max(now, min(candidates))
        elapsed = at - now
        self.clock.advance(elapsed)
        completed: set[Future] = set()
        for name, items in self._running.items():
            still: list[_Running] = []
            for item in items:
                item.remaining -= elapsed * rates[name]
                if item.remaining <= _EPSILON * max(1.0, at):
                    self._complete(item)
                    completed.add(item.future)
                else:
                    still.append(item)
            items[:] = still
        arrivals = [a for a in self._pending_arrivals if a[0] <= at]
        for arrival in arrivals:
            self._pending_arrivals.remove(arrival)
            arrival[2].set_result(first_stage(self._jobs[arrival[1]]))
            completed.add(arrival[2])
        return completed

    def _complete(self, item: _Running) -> None:
        try:
            result = cast(SimulatedJob, item.job).complete_stage(item.stage, item.resource)
            item.future.set_result(StageOutcome(result, first_stage(item.job)))
        except Exception as exc:  # noqa: BLE001 - a job's error is the job's result, never the simulator's
            item.future.set_exception(exc)


def simulate(
    jobs: Iterable[Job],
    resources: Iterable[Resource],
    policy: Policy | str = "round-robin",
    arrivals: Mapping[str, float] | None = None,
    max_consecutive_failures: int = 3,
) -> Trace:
    """Run ``jobs`` (e.g. ``MockJob``) under ``policy`` in simulated time; return the trace."""
    resources = list(resources)
    backend = SimulatedBackend(resources, arrivals=arrivals)
    with Scheduler(resources, policy, backend, max_consecutive_failures) as scheduler:
        for job in jobs:
            scheduler.submit(job)
        return scheduler.run()
