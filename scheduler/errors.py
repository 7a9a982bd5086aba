"""The scheduler's exceptions.

They share one base, so a caller can tell the scheduler's own failures from a job's.
Each keeps its fields in ``args`` and pickles with them: a worker process or a Ray
actor raises them on one side of a pipe and the driver reads their fields on the other.
"""

from __future__ import annotations


class SchedulerError(Exception):
    """Base of every exception the scheduler raises on purpose."""


class WorkerDied(SchedulerError):
    """The process that held a job is gone (killed, crashed, its node lost).

    ``reason`` says how, in the words of whatever saw it die ("killed by SIGKILL",
    "exit code 3", Ray's account of an actor's death)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class PolicyStalled(SchedulerError, RuntimeError):
    """The policy started no stage while jobs wait and nothing runs: a policy bug that
    would otherwise hang the loop."""
