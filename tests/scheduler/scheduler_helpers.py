"""Helpers shared by the scheduler tests (a uniquely named module, importable from tests/scheduler)."""

from __future__ import annotations

from scheduler.trace import StageRecord, Trace

THESIS = {"select": 22.0, "build": 8.3, "profile": 39.5, "update": 22.0}


def by_job(trace: Trace) -> dict[str, list[StageRecord]]:
    """Each job's stage records in start order."""
    jobs: dict[str, list[StageRecord]] = {}
    for record in sorted(trace.records, key=lambda r: (r.start, r.end)):
        jobs.setdefault(record.job, []).append(record)
    return jobs


def find(trace: Trace, job: str, stage: str, iteration: int = 0, task: int = 0) -> StageRecord:
    """The one record of ``job``'s ``stage`` in (task, iteration)."""
    (record,) = [
        r
        for r in trace.records
        if r.job == job and r.stage == stage and r.iteration == iteration and r.task == task
    ]
    return record
