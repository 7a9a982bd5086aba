"""The policy interface: a state in, the stages to start out.

Policies hold no clocks, threads or I/O, so a test can build a state by hand and
assert the actions (the shape of dask's worker state machine). The loop in
:mod:`scheduler.loop` applies the actions and feeds back what happened.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import ClassVar

from scheduler.base import Stage
from scheduler.state import State


@dataclass(frozen=True)
class Start:
    """Action: run ``job_id``'s ready ``stage`` on the resource named ``resource_name``."""

    job_id: str
    stage: Stage
    resource_name: str


class Policy(ABC):
    """Decides which ready stage starts on which free resource.

    ``exclusive`` is False only for a policy that deliberately oversubscribes
    resources; the loop then lets its starts onto busy resources and the trace is
    marked so that its device overlaps are expected, not a bug.
    """

    name: ClassVar[str]
    exclusive: ClassVar[bool] = True

    @abstractmethod
    def decide(self, state: State) -> list[Start]:
        """Stages to start now; each job at most once, never beyond a free slot if exclusive."""

    def stage_finished(
        self, job_id: str, stage: Stage, next_stage: Stage | None, duration: float
    ) -> None:
        """A stage succeeded after ``duration`` seconds; policies that learn override this."""

    def job_removed(self, job_id: str) -> None:
        """A job is done or failed; policies that keep per-job state forget it here."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"
