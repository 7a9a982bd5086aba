"""The contract between the scheduler and the jobs it drives.

The thesis (section 4.1.2) asks every job four questions, its *load-awareness*:
is the current stage done, is the whole job done, on which resource does the current
stage run, and on which resource will the next stage run. A job answers the last one
through :meth:`Job.next_stage`; the scheduler answers the other three itself, because it
is the one that started the stage, chose the resource and saw the stage finish
(see :mod:`scheduler.state`). That keeps a job's side of the contract to three methods.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

CLIENT = "client"
DEVICE = "device"


class StageStatus(StrEnum):
    """How a stage ended."""

    OK = "ok"
    ERROR = "error"


def kind_of(role: str) -> str:
    """``"device"`` for ``"device:<key>"`` roles; the role itself otherwise."""
    return role.split(":", 1)[0]


@dataclass(frozen=True)
class Stage:
    """One schedulable unit of a job.

    ``resource`` is a *role*, not a machine: ``"client"`` or ``"device:<key>"``. The
    scheduler picks the concrete resource of that role, so a job never has to know
    which device server is free. ``estimate`` (seconds) is an optional hint for
    policies that predict; they replace it with measurements as they gather them.
    """

    name: str
    resource: str
    task: int = 0
    iteration: int = 0
    estimate: float | None = None

    @property
    def resource_kind(self) -> str:
        return kind_of(self.resource)


@dataclass(frozen=True)
class StageResult:
    """What a job reports after a stage: failures are data, not exceptions.

    A stage that returns ``status="error"`` ends its job just as a raised exception
    would; the scheduler records ``error`` and goes on with the other jobs. ``details``
    (picklable) travel to the scheduler's ``on_stage`` listener: progress for a display,
    what the stage measured.
    """

    status: StageStatus = StageStatus.OK
    error: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == StageStatus.OK


class FailureCause(StrEnum):
    """What ended a job that failed (see :class:`Failure`)."""

    STAGE = "stage"  # a stage reported an error or raised
    WORKER = "worker"  # the process that held the job died
    CANCELLED = "cancelled"  # Scheduler.cancel stopped it
    START = "start"  # it could not be built
    RESOURCE = "resource"  # no resource in rotation can run its next stage


@dataclass(frozen=True)
class Failure:
    """Why a job failed, as fields, so that callers choose what to show without
    taking a sentence apart.

    ``stage`` names the stage that failed or was waiting (None: the job failed before
    its first stage, while it was built); ``resource`` the resource that stage ran on
    (None: it was not running). ``message`` is the cause's own words: the stage's error,
    how the worker died, the reason the job was cancelled, why no resource is left.
    """

    stage: str | None
    resource: str | None
    cause: FailureCause
    message: str

    @property
    def what(self) -> str:
        """What went wrong, without where: a stage record's error."""
        if self.cause is FailureCause.WORKER:
            return f"worker process died ({self.message})"
        return self.message

    def __str__(self) -> str:
        """One line for people: where, then what. A cancellation or a lack of
        resources says it all in its message."""
        if self.cause in (FailureCause.CANCELLED, FailureCause.RESOURCE):
            return self.message
        if self.stage is None and self.cause in (FailureCause.START, FailureCause.WORKER):
            return f"could not start: {self.what}"
        if self.stage is None or self.resource is None:
            return self.what
        return f"{self.stage} on {self.resource}: {self.what}"


class Job(ABC):
    """A long computation split into stages that the scheduler starts one at a time.

    A job never runs its next stage on its own: it waits until the scheduler calls
    :meth:`run_stage`, which is what lets the scheduler postpone a stage whose resource
    is busy and so prevent interference (thesis section 4.1.1).
    """

    @property
    @abstractmethod
    def job_id(self) -> str:
        """A name unique among the jobs of one scheduler."""

    @abstractmethod
    def next_stage(self) -> Stage | None:
        """The stage to run next, or None when the job is complete."""

    @abstractmethod
    def run_stage(self, stage: Stage, resource_name: str) -> StageResult:
        """Run ``stage`` (the one :meth:`next_stage` returned) on the named resource.

        ``resource_name`` is the concrete resource the scheduler chose for the stage's
        role, e.g. which device server to profile on.
        """

    def is_complete(self) -> bool:
        """True once every stage has run."""
        return self.next_stage() is None

    def close(self) -> None:
        """Release what the job holds where it runs (temporary files, helper processes).

        The backend calls it when it releases the job, in the job's process; a job whose
        process is killed never gets the call."""


JobFactory = Callable[[], Job]
"""A picklable zero-argument callable that builds a job inside a worker process.

Real jobs hold state that cannot cross a process boundary (compiled modules, RPC
sessions), so the process backend sends the factory and builds the job where it runs.
"""


@dataclass(frozen=True)
class Resource:
    """Something a stage runs on: a client host or one target device.

    ``capacity`` is how many stages may run on it at once. Devices always have
    capacity 1, because two jobs profiling on one device distort each other's
    measurements (thesis section 3.4.2).
    """

    name: str
    role: str
    capacity: int = 1

    def __post_init__(self) -> None:
        if self.capacity < 1:
            raise ValueError(f"resource {self.name!r}: capacity must be >= 1, got {self.capacity}")
        if self.kind == DEVICE and self.capacity != 1:
            raise ValueError(f"device {self.name!r} must have capacity 1: profiling is exclusive")

    @property
    def kind(self) -> str:
        return kind_of(self.role)
