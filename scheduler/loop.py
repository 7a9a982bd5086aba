"""The loop that carries out a policy's decisions on a backend."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from types import TracebackType
from typing import Any

from scheduler.backends import Backend, get_backend
from scheduler.base import Failure, FailureCause, Job, JobFactory, Resource, StageStatus
from scheduler.errors import PolicyStalled, WorkerDied
from scheduler.policies import Policy, Start, get_policy
from scheduler.resources import ResourcePool
from scheduler.state import JobStatus, State
from scheduler.trace import JobOutcome, StageRecord, Trace

StageListener = Callable[[str, StageRecord, dict[str, Any]], None]
JobListener = Callable[[str, JobOutcome], None]


class Scheduler:
    """Interleaves the stages of many jobs across resources without interference.

    Each round: take newly submitted jobs, ask the policy which ready stages to start,
    start them on the backend, then block until some stage finishes (or a job is
    submitted). A job's failure, raised or reported, or its worker's death, ends that
    job only: its resource is freed and the others go on. A device that fails
    ``max_consecutive_failures`` stages in a row is taken out of rotation, and jobs
    that then have no resource left for their next stage fail with that reason.
    """

    def __init__(
        self,
        resources: Iterable[Resource],
        policy: Policy | str = "round-robin",
        backend: Backend | str = "processes",
        max_consecutive_failures: int = 3,
    ) -> None:
        self.policy = get_policy(policy)
        self.state = State(ResourcePool(resources, max_consecutive_failures))
        self.backend = get_backend(backend)
        try:
            self.backend.bind(list(self.state.pool.resources.values()))
        except BaseException:
            self.backend.close()
            raise
        self._lock = threading.Lock()
        self._submitted: list[tuple[str, Job | JobFactory]] = []
        self._ids: set[str] = set()
        self._wakeup: Future[None] = Future()
        self._cancel_requests: dict[str, str] = {}
        self._cancelled: dict[str, str] = {}
        self._on_stage: StageListener | None = None
        self._on_job_end: JobListener | None = None
        self._stopping = False

    def __enter__(self) -> Scheduler:
        return self

    def __exit__(self, *exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def submit(self, job: Job | JobFactory, job_id: str | None = None) -> str:
        """Add a job; safe to call from another thread while :meth:`run` is running.

        ``job`` is a job object or a picklable factory that builds one where it will
        run. The id defaults to the job's ``job_id`` (or the factory's ``job_id``
        attribute, else ``job<N>``).
        """
        with self._lock:
            if job_id is None:
                job_id = job.job_id if isinstance(job, Job) else getattr(job, "job_id", None)
                job_id = job_id or f"job{len(self._ids)}"
            if job_id in self._ids:
                raise ValueError(f"duplicate job id {job_id!r}")
            self._ids.add(job_id)
            self._submitted.append((job_id, job))
            if not self._wakeup.done():
                self._wakeup.set_result(None)
        return job_id

    def cancel(self, job_id: str, reason: str) -> None:
        """Stop a job now, whatever it is doing (a timeout); it fails with ``reason``.

        Safe to call from another thread; needs a backend that can stop a running job
        (processes, Ray)."""
        with self._lock:
            self._cancel_requests[job_id] = reason
            if not self._wakeup.done():
                self._wakeup.set_result(None)

    def stop(self) -> None:
        """End a :meth:`run` started with ``serve=True`` at its next round; safe to call
        from another thread. Jobs in flight are left to :meth:`close`."""
        with self._lock:
            self._stopping = True
            if not self._wakeup.done():
                self._wakeup.set_result(None)

    def run(
        self,
        on_stage: StageListener | None = None,
        on_job_end: JobListener | None = None,
        serve: bool = False,
    ) -> Trace:
        """Run until every submitted job is done or failed; return what ran where.

        With ``serve``, run until :meth:`stop` instead: idle, the loop waits for the next
        :meth:`submit` (a service whose jobs arrive whenever their users send them).

        ``on_stage(job_id, record, details)`` hears of every stage that ended, with the
        details its job reported; ``on_job_end(job_id, outcome)`` of every job that
        ended. Both run on the loop's thread and may :meth:`submit` more jobs, which is
        how a caller keeps a fixed number of jobs in flight."""
        self._on_stage, self._on_job_end = on_stage, on_job_end
        state, pool = self.state, self.state.pool
        origin = self.backend.now()
        trace = Trace(
            resources=list(pool.resources.values()),
            policy=self.policy.name,
            exclusive=self.policy.exclusive,
        )
        arriving: dict[Future, tuple[int, str]] = {}
        running: dict[Future, str] = {}
        sequence = itertools.count()
        while True:
            if self._stopping:
                return trace
            for job_id, job in self._take_submitted():
                arriving[self._add_job(job_id, job)] = (next(sequence), job_id)
            self._carry_out_cancellations(set(running.values()), trace)
            state.time = self.backend.now() - origin
            for start in self.policy.decide(state):
                running[self._start(start)] = start.job_id
            if not running and not arriving:
                with self._lock:
                    more = bool(self._submitted)
                if more:  # a listener submitted a job
                    continue
                if state.unfinished == 0:
                    if not serve:
                        return trace
                    self.backend.wait([self._wakeup])  # idle until a submit or stop
                    continue
                waiting = ", ".join(r.job_id for r in state.jobs.values() if not r.finished)
                raise PolicyStalled(
                    f"policy {self.policy.name!r} started nothing while jobs wait: {waiting}"
                )
            done = self.backend.wait([*arriving, *running, self._wakeup])
            state.time = self.backend.now() - origin
            for future in sorted((f for f in done if f in arriving), key=lambda f: arriving[f][0]):
                self._arrived(arriving.pop(future)[1], future, trace)
            for future in sorted(
                (f for f in done if f in running), key=lambda f: state.jobs[running[f]].order
            ):
                self._finished(running.pop(future), future, trace)

    def close(self) -> None:
        """Stop the backend's workers."""
        self.backend.close()

    def _take_submitted(self) -> list[tuple[str, Job | JobFactory]]:
        with self._lock:
            submitted, self._submitted = self._submitted, []
            if self._wakeup.done():
                self._wakeup = Future()
        return submitted

    def _carry_out_cancellations(self, running: set[str], trace: Trace) -> None:
        """Stop the jobs :meth:`cancel` named: a running stage or a job being built fails
        when its worker dies; a job waiting for a resource fails here."""
        with self._lock:
            requests, self._cancel_requests = self._cancel_requests, {}
        for job_id, reason in requests.items():
            record = self.state.jobs.get(job_id)
            if job_id not in self._ids or (record is not None and record.finished):
                continue
            self._cancelled[job_id] = reason
            self.backend.cancel(job_id)
            if record is not None and job_id not in running:
                assert record.stage is not None
                self._fail(
                    job_id,
                    Failure(record.stage.name, None, FailureCause.CANCELLED, reason),
                    trace.jobs[job_id].arrived,
                    trace,
                )

    def _add_job(self, job_id: str, job: Job | JobFactory) -> Future:
        try:
            return self.backend.add_job(job_id, job)
        except Exception as exc:  # noqa: BLE001 - a job's error fails that job, never the loop
            failed: Future = Future()
            failed.set_exception(exc)
            return failed

    def _arrived(self, job_id: str, future: Future, trace: Trace) -> None:
        """The backend holds the job now (built, if from a factory) and knows its first stage."""
        try:
            first = future.result()
        except Exception as exc:  # noqa: BLE001 - a job's error fails that job, never the loop
            self.state.add_job(job_id, None)
            self._fail(
                job_id,
                self._failure(job_id, exc, None, None, FailureCause.START),
                self.state.time,
                trace,
            )
            return
        record = self.state.add_job(job_id, first)
        trace.jobs[job_id] = JobOutcome(JobStatus.RUNNING, self.state.time, self.state.time)
        if record.status is JobStatus.DONE:
            self._done(job_id, trace)
        else:
            self._check_runnable(job_id, trace)

    def _start(self, start: Start) -> Future:
        record = self.state.jobs[start.job_id]
        if start.stage != record.stage:
            raise ValueError(
                f"policy started {start.stage} for {start.job_id!r}, its stage is {record.stage}"
            )
        self.state.start(start.job_id, start.resource_name, exclusive=self.policy.exclusive)
        try:
            return self.backend.run_stage(
                start.job_id, start.stage, self.state.pool.resources[start.resource_name]
            )
        except Exception as exc:  # noqa: BLE001 - a job's error fails that job, never the loop
            failed: Future = Future()
            failed.set_exception(exc)
            return failed

    def _finished(self, job_id: str, future: Future, trace: Trace) -> None:
        state = self.state
        record = state.jobs[job_id]
        stage, resource, started = record.stage, record.resource, record.started_at
        assert stage is not None and resource is not None and started is not None
        failure = None
        try:
            outcome = future.result()
            if not outcome.result.ok:
                failure = Failure(
                    stage.name,
                    resource,
                    FailureCause.STAGE,
                    outcome.result.error or "stage reported an error",
                )
        except Exception as exc:  # noqa: BLE001 - a job's error fails that job, never the loop
            outcome = None
            failure = self._failure(job_id, exc, stage.name, resource, FailureCause.STAGE)
        stage_record = StageRecord(
            job_id,
            stage.task,
            stage.iteration,
            stage.name,
            resource,
            state.pool.resources[resource].role,
            started,
            state.time,
            StageStatus.OK if failure is None else StageStatus.ERROR,
            failure.what if failure else "",
        )
        trace.records.append(stage_record)
        if self._on_stage is not None:
            self._on_stage(job_id, stage_record, outcome.result.details if outcome else {})
        if job_id in self._cancelled:  # the stage ended before its worker was stopped
            failure = Failure(stage.name, resource, FailureCause.CANCELLED, self._cancelled[job_id])
        if failure is not None:
            self._fail(job_id, failure, trace.jobs[job_id].arrived, trace)
            return
        self.policy.stage_finished(job_id, stage, outcome.next_stage, state.time - started)
        state.finish(job_id, outcome.next_stage)
        if outcome.next_stage is None:
            self._done(job_id, trace)
        else:
            self._check_runnable(job_id, trace)

    def _done(self, job_id: str, trace: Trace) -> None:
        self.backend.release(job_id)
        self.policy.job_removed(job_id)
        trace.jobs[job_id] = JobOutcome(JobStatus.DONE, trace.jobs[job_id].arrived, self.state.time)
        if self._on_job_end is not None:
            self._on_job_end(job_id, trace.jobs[job_id])

    def _failure(
        self,
        job_id: str,
        exc: BaseException,
        stage: str | None,
        resource: str | None,
        otherwise: FailureCause,
    ) -> Failure:
        """What an exception from the backend means for ``job_id``: its cancellation,
        its worker's death, or else ``otherwise`` with the exception's type and text."""
        if job_id in self._cancelled:
            return Failure(stage, resource, FailureCause.CANCELLED, self._cancelled[job_id])
        if isinstance(exc, WorkerDied):
            return Failure(stage, resource, FailureCause.WORKER, exc.reason)
        return Failure(stage, resource, otherwise, f"{type(exc).__name__}: {exc}")

    def _fail(self, job_id: str, failure: Failure, arrived: float, trace: Trace) -> None:
        retired = self.state.fail(job_id, failure, resource_fault=job_id not in self._cancelled)
        self.backend.release(job_id)
        self.policy.job_removed(job_id)
        trace.jobs[job_id] = JobOutcome(JobStatus.FAILED, arrived, self.state.time, failure)
        if self._on_job_end is not None:
            self._on_job_end(job_id, trace.jobs[job_id])
        if retired is None:
            return
        trace.retired[retired] = self.state.pool.retired[retired]
        role = self.state.pool.resources[retired].role
        for waiting in list(self.state.ready(role)):
            self._check_runnable(waiting.job_id, trace)

    def _check_runnable(self, job_id: str, trace: Trace) -> None:
        """Fail a ready job at once if no resource in rotation can ever run its stage."""
        record = self.state.jobs[job_id]
        assert record.stage is not None
        role = record.stage.resource
        if not self.state.pool.in_rotation(role):
            known = sorted(self.state.pool.roles())
            reason = f"no resource in rotation for {role!r} (roles: {', '.join(known)}; retired: "
            reason += f"{', '.join(sorted(self.state.pool.retired)) or 'none'})"
            self._fail(
                job_id,
                Failure(record.stage.name, None, FailureCause.RESOURCE, reason),
                trace.jobs[job_id].arrived,
                trace,
            )
