"""Where stages run: the backend interface.

A backend keeps each job where its stages execute (a thread pool, one worker process
per job, one Ray actor per job) and hands back ``concurrent.futures.Future`` objects,
so the loop waits on all of them the same way. The loop only ever holds a job's id and
its next :class:`~scheduler.base.Stage`; the backend reports that stage after
construction and after every stage it runs.

Failures look the same whatever runs behind a backend: a stage's own exception, or
:class:`~scheduler.errors.WorkerDied` when the process holding the job is gone.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import ClassVar

from scheduler.base import Job, JobFactory, Resource, Stage, StageResult

WAKE_S = 0.2  # how often a waiting loop wakes to act on signals (Ctrl-C)


@dataclass(frozen=True)
class StageOutcome:
    """A stage's result and the job's next stage (None: the job is complete)."""

    result: StageResult
    next_stage: Stage | None


def first_stage(job: Job) -> Stage | None:
    """The stage a freshly built job starts with."""
    return None if job.is_complete() else job.next_stage()


def execute_stage(job: Job, stage: Stage, resource_name: str) -> StageOutcome:
    """Run one stage and read the next one in the same place, so one round trip does both."""
    result = job.run_stage(stage, resource_name)
    return StageOutcome(result, first_stage(job))


def close_job(job: Job) -> None:
    """Let a released job free what it holds (:meth:`Job.close`); a failure there is
    logged, and ends nothing else."""
    try:
        job.close()
    except Exception:
        logging.getLogger(__name__).exception("job %s: close() failed", job.job_id)


@dataclass(frozen=True)
class _Given:
    """Factory for a job object that is itself picklable."""

    job: Job

    def __call__(self) -> Job:
        return self.job


def as_factory(job: Job | JobFactory) -> JobFactory:
    """A factory to send to a worker: the factory as given, or one that returns ``job``."""
    return _Given(job) if isinstance(job, Job) else job


class Backend(ABC):
    """Executes stages of jobs it holds; every call returns at once with a future."""

    name: ClassVar[str]

    def bind(self, resources: Sequence[Resource]) -> None:
        """Learn the scheduler's resources before any job arrives.

        Backends that decide where a job lives (the Ray backend pins jobs to nodes)
        read the client resources here; the others need nothing.
        """

    def now(self) -> float:
        """The clock the loop stamps the trace with (seconds)."""
        return time.monotonic()

    @abstractmethod
    def add_job(self, job_id: str, job: Job | JobFactory) -> Future[Stage | None]:
        """Take a job (or build it from a factory); resolves to its first stage."""

    @abstractmethod
    def run_stage(self, job_id: str, stage: Stage, resource: Resource) -> Future[StageOutcome]:
        """Run ``stage`` of ``job_id`` on ``resource``; resolves to its outcome."""

    def cancel(self, job_id: str) -> None:
        """Stop ``job_id`` now, mid-stage: its pending future fails with :class:`WorkerDied`.

        Only backends whose jobs live in processes of their own can do this."""
        raise NotImplementedError(f"the {self.name} backend cannot stop a running job")

    @abstractmethod
    def release(self, job_id: str) -> None:
        """Forget a finished or failed job and free whatever held it (e.g. its process),
        closing it first where it lives (:func:`close_job`)."""

    def wait(self, futures: Iterable[Future]) -> set[Future]:
        """Block until at least one future is done; return the done ones.

        Waits in slices of :data:`WAKE_S`: Linux may hand Ctrl-C to any thread (a relay
        thread, a runtime's), and the main thread only raises KeyboardInterrupt once it
        wakes; blocked until a stage ended, a sweep ignored Ctrl-C through a run's
        minutes-long evaluation."""
        pending = list(futures)
        while True:
            done = concurrent.futures.wait(
                pending, timeout=WAKE_S, return_when=concurrent.futures.FIRST_COMPLETED
            ).done
            if done:
                return done

    def close(self) -> None:
        """Release every job and stop the workers."""
