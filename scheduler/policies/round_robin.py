"""Interleaved round-robin scheduling (thesis Listing 2)."""

from __future__ import annotations

from itertools import islice

from scheduler.policies.base import Policy, Start
from scheduler.state import State


class RoundRobin(Policy):
    """Each free resource takes the job that has waited longest for its role.

    Listing 2 scans the jobs in registration order each round and queues every job
    whose stage is done; the per-role ready queues of :class:`~scheduler.state.State`
    hold the same order (readiness, ties by registration) without the rescan, and a
    job sits in a queue only while ready, so a finished stage is never queued twice.
    """

    name = "round-robin"

    def decide(self, state: State) -> list[Start]:
        starts: list[Start] = []
        for role in state.ready_roles():
            slots = state.pool.slots(role)
            for record, resource_name in zip(islice(state.ready(role), len(slots)), slots):
                assert record.stage is not None
                starts.append(Start(record.job_id, record.stage, resource_name))
        return starts
