"""Run each job in its own long-lived worker process."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor

from scheduler.backends.base import Backend, StageOutcome, as_factory, execute_stage, first_stage
from scheduler.base import Job, JobFactory, Resource, Stage

_JOB: Job | None = None
"""The one job a worker process holds."""


def _construct(factory: JobFactory) -> Stage | None:
    global _JOB
    _JOB = factory()
    return first_stage(_JOB)


def _run_stage(stage: Stage, resource_name: str) -> StageOutcome:
    assert _JOB is not None, "worker has no job"
    return execute_stage(_JOB, stage, resource_name)


class ProcessBackend(Backend):
    """One ``ProcessPoolExecutor(max_workers=1)`` per job: the default for real jobs.

    The job is built inside its worker from a picklable factory, because real jobs
    hold state that cannot be pickled, and stays there for all its stages. A job that
    kills its process (segfault, out of memory) breaks only its own pool: the loop
    sees ``BrokenProcessPool`` on that job's future and fails that job alone.
    ``start_method`` defaults to "spawn", which is safe in a process that runs threads.
    """

    name = "processes"

    def __init__(self, start_method: str = "spawn") -> None:
        self._context = multiprocessing.get_context(start_method)
        self._workers: dict[str, ProcessPoolExecutor] = {}

    def add_job(self, job_id: str, job: Job | JobFactory) -> Future[Stage | None]:
        worker = ProcessPoolExecutor(max_workers=1, mp_context=self._context)
        self._workers[job_id] = worker
        return worker.submit(_construct, as_factory(job))

    def run_stage(self, job_id: str, stage: Stage, resource: Resource) -> Future[StageOutcome]:
        return self._workers[job_id].submit(_run_stage, stage, resource.name)

    def release(self, job_id: str) -> None:
        worker = self._workers.pop(job_id, None)
        if worker is not None:
            worker.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        for job_id in list(self._workers):
            self.release(job_id)
