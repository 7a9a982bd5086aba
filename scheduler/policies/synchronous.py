"""Synchronous scheduling (thesis Listing 4): the deliberate worst case."""

from __future__ import annotations

from scheduler.policies.base import Policy, Start
from scheduler.state import JobStatus, State


class Synchronous(Policy):
    """Starts the same stage of every job in a batch at once, on the same resource.

    It exists only to measure interference: it waits until every job of the batch is
    ready and then puts all their stages on the first resource of the role, ignoring
    capacity on purpose, so several jobs profile on one device together. Its traces
    are marked non-exclusive, so their device overlaps are expected.

    Unlike Listing 4, it does not wait for a second job, and a batch lasts until all
    of its jobs are finished (not until the first one is), so unequal jobs still
    complete; jobs that arrive meanwhile form the next batch.
    """

    name = "synchronous"
    exclusive = False

    def __init__(self) -> None:
        self._batch: list[str] = []

    def decide(self, state: State) -> list[Start]:
        batch = [state.jobs[j] for j in self._batch if not state.jobs[j].finished]
        if not batch:
            batch = [r for r in state.jobs.values() if not r.finished]
            self._batch = [r.job_id for r in batch]
        if not batch or any(r.status is not JobStatus.READY for r in batch):
            return []
        starts: list[Start] = []
        for record in batch:
            assert record.stage is not None
            targets = state.pool.in_rotation(record.stage.resource)
            if targets:
                starts.append(Start(record.job_id, record.stage, targets[0].name))
        return starts
