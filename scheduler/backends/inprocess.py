"""Run stages on a thread pool in the scheduler's own process."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor

from scheduler.backends.base import Backend, StageOutcome, close_job, execute_stage, first_stage
from scheduler.base import Job, JobFactory, Resource, Stage


def _construct(jobs: dict[str, Job], job_id: str, factory: JobFactory) -> Stage | None:
    job = factory()
    jobs[job_id] = job
    return first_stage(job)


class InProcessBackend(Backend):
    """Threads, for jobs that are cheap, release the GIL, or only sleep (``MockJob``).

    Stages of different jobs share the interpreter, so a job that crashes the process
    takes the scheduler with it; real tuning jobs belong in :class:`ProcessBackend`.
    """

    name = "threads"

    def __init__(self, max_workers: int = 32) -> None:
        self._pool = ThreadPoolExecutor(max_workers, thread_name_prefix="scheduler-stage")
        self._jobs: dict[str, Job] = {}

    def add_job(self, job_id: str, job: Job | JobFactory) -> Future[Stage | None]:
        if isinstance(job, Job):
            self._jobs[job_id] = job
            future: Future[Stage | None] = Future()
            try:
                future.set_result(first_stage(job))
            except Exception as exc:  # noqa: BLE001 - a job's error fails that job, never the scheduler
                future.set_exception(exc)
            return future
        return self._pool.submit(_construct, self._jobs, job_id, job)

    def run_stage(self, job_id: str, stage: Stage, resource: Resource) -> Future[StageOutcome]:
        return self._pool.submit(execute_stage, self._jobs[job_id], stage, resource.name)

    def release(self, job_id: str) -> None:
        job = self._jobs.pop(job_id, None)
        if job is not None:
            close_job(job)

    def close(self) -> None:
        for job_id in list(self._jobs):
            self.release(job_id)
        self._pool.shutdown(wait=True, cancel_futures=True)
