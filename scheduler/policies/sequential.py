"""Sequential scheduling (thesis Listing 3): one job at a time, like plain autotuning."""

from __future__ import annotations

from scheduler.policies.base import Policy, Start
from scheduler.state import JobStatus, State


class Sequential(Policy):
    """Runs the oldest unfinished job's stages back to back, then the next job.

    This is single-job autotuning driven through the scheduler: the baseline that
    shows both the idle time interleaving recovers and the scheduler's own overhead.
    """

    name = "sequential"

    def __init__(self) -> None:
        self._current: str | None = None

    def decide(self, state: State) -> list[Start]:
        current = state.jobs.get(self._current) if self._current else None
        if current is None or current.finished:
            current = next((r for r in state.jobs.values() if not r.finished), None)
            self._current = current.job_id if current else None
        if current is None or current.status is not JobStatus.READY or current.stage is None:
            return []
        free = state.pool.free(current.stage.resource)
        return [Start(current.job_id, current.stage, free[0].name)] if free else []
