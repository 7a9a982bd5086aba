"""What a policy sees: jobs, their current stage, and the resources' occupancy.

The scheduler answers three of the four load-awareness questions from this state,
because it started every stage and saw every stage finish:

- is the current stage done: ``status`` is not ``RUNNING``;
- is the whole job done: ``status`` is ``DONE`` (or ``FAILED``);
- which resource the current stage runs on: ``resource``;
- which resource the next stage needs: ``stage.resource`` while ``READY``
  (the job's own answer, taken from :meth:`scheduler.base.Job.next_stage`).

Ready jobs are kept in one queue per role, in the order they became ready, so a
round-robin decision costs O(free resources), not O(jobs), and a job whose stage is
done is queued exactly once (the "pending" state Listing 2 lacks).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum

from scheduler.base import Failure, Resource, Stage
from scheduler.resources import ResourcePool


class JobStatus(StrEnum):
    READY = "ready"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


@dataclass
class JobRecord:
    """The scheduler's view of one job: never the job object itself.

    ``stage`` is the stage waiting to run while ``READY`` and the running one while
    ``RUNNING``; holding only this lets jobs live in other processes.
    """

    job_id: str
    order: int
    stage: Stage | None
    status: JobStatus
    resource: str | None = None
    started_at: float | None = None
    failure: Failure | None = None

    @property
    def finished(self) -> bool:
        return self.status in (JobStatus.DONE, JobStatus.FAILED)


class State:
    """Jobs and resources at one instant; mutated only by the loop (or a test)."""

    def __init__(self, resources: ResourcePool | Iterable[Resource], time: float = 0.0) -> None:
        self.pool = resources if isinstance(resources, ResourcePool) else ResourcePool(resources)
        self.time = time
        self.jobs: dict[str, JobRecord] = {}
        self.running: dict[str, JobRecord] = {}
        self.unfinished = 0
        self._ready: dict[str, dict[str, JobRecord]] = {}

    def add_job(self, job_id: str, stage: Stage | None) -> JobRecord:
        """Register a job whose first stage is ``stage`` (None: nothing to do)."""
        if job_id in self.jobs:
            raise ValueError(f"duplicate job id {job_id!r}")
        record = JobRecord(job_id, len(self.jobs), stage, JobStatus.DONE)
        self.jobs[job_id] = record
        self.unfinished += 1
        self._make_ready(record, stage)
        return record

    def ready(self, role: str) -> Iterator[JobRecord]:
        """Jobs whose next stage needs ``role``, in the order they became ready."""
        return iter(self._ready.get(role, {}).values())

    def ready_roles(self) -> list[str]:
        return [role for role, queue in self._ready.items() if queue]

    def start(self, job_id: str, resource_name: str, exclusive: bool = True) -> JobRecord:
        """Mark ``job_id``'s ready stage as running on ``resource_name``.

        ``exclusive=False`` lets a stage onto a full resource; only the synchronous
        policy asks for that, to measure interference.
        """
        record = self.jobs[job_id]
        if record.status is not JobStatus.READY or record.stage is None:
            raise ValueError(f"job {job_id!r} is {record.status.value}, not ready")
        resource = self.pool.resources.get(resource_name)
        if resource is None:
            raise ValueError(f"unknown resource {resource_name!r}")
        if resource.role != record.stage.resource:
            raise ValueError(
                f"job {job_id!r} stage {record.stage.name!r} needs {record.stage.resource!r}, "
                f"resource {resource_name!r} is {resource.role!r}"
            )
        self.pool.acquire(resource_name, exclusive)
        del self._ready[record.stage.resource][job_id]
        record.status = JobStatus.RUNNING
        record.resource = resource_name
        record.started_at = self.time
        self.running[job_id] = record
        return record

    def finish(self, job_id: str, next_stage: Stage | None) -> None:
        """The running stage succeeded; the job moves on to ``next_stage``."""
        record = self._stop(job_id, ok=True)[0]
        self._make_ready(record, next_stage)

    def fail(self, job_id: str, failure: Failure, resource_fault: bool = True) -> str | None:
        """End the job as failed; returns the resource this retired, if any.

        ``resource_fault=False`` (a job cancelled from outside) keeps its running
        stage's failure off the resource's count."""
        record = self.jobs[job_id]
        retired = None
        if record.status is JobStatus.RUNNING:
            retired = self._stop(job_id, ok=False if resource_fault else None)[1]
        elif record.status is JobStatus.READY and record.stage is not None:
            del self._ready[record.stage.resource][job_id]
        if not record.finished:
            self.unfinished -= 1
        record.status = JobStatus.FAILED
        record.failure = failure
        return retired

    def _stop(self, job_id: str, ok: bool | None) -> tuple[JobRecord, str | None]:
        record = self.running.pop(job_id)
        assert record.resource is not None
        retired = record.resource if self.pool.release(record.resource, ok) else None
        record.resource = None
        record.started_at = None
        return record, retired

    def _make_ready(self, record: JobRecord, stage: Stage | None) -> None:
        record.stage = stage
        if stage is None:
            record.status = JobStatus.DONE
            self.unfinished -= 1
        else:
            record.status = JobStatus.READY
            self._ready.setdefault(stage.resource, {})[record.job_id] = record
