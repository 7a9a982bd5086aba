"""Fakes shipped with the package: a configurable job and a clock that only moves when told.

Tests and the simulation use them instead of real tuning jobs and real time, so they
run in milliseconds and never sleep to measure anything.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path

from scheduler.base import Job, Stage, StageResult

STAGE_NAMES = ("select", "build", "profile", "update")
"""The stages of one autotuning iteration, in order (thesis section 3)."""

STAGE_RESOURCES = {
    "select": "client",
    "build": "client",
    "profile": "device:default",
    "update": "client",
}
"""Where each stage runs: everything on the client except profiling."""

Durations = float | Mapping[str, float] | Callable[[Stage], float]


class FakeClock:
    """Time that advances only through :meth:`advance` (pyperf's fake timer idea)."""

    def __init__(self, start: float = 0.0) -> None:
        self._now = start

    def now(self) -> float:
        return self._now

    __call__ = now

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"time cannot go back ({seconds} s)")
        self._now += seconds


class MockJob(Job):
    """A job of ``tasks`` x ``iterations`` x ``stage_names`` stages that only takes time.

    ``durations`` is seconds per stage: one number, a mapping by stage name, or a
    callable of the stage. ``resources`` maps stage names to roles. In a real run
    :meth:`run_stage` sleeps ``duration * time_scale``; in a simulation the simulator
    owns time: it reads :meth:`duration` and calls :meth:`complete_stage` at the
    simulated end.

    Faults, for testing the scheduler's handling of them: stages listed in
    ``fail_at`` as (task, iteration, name) raise; any stage run on a resource named in
    ``fail_on`` raises (a dead device); the stage at ``crash_at`` kills its own worker
    process with SIGKILL halfway through (only inside a worker process, so a misuse
    cannot kill the scheduler). ``closed_marker``: a file :meth:`close` creates, where
    the job lives, naming its process (tests see a backend close its jobs).
    """

    def __init__(
        self,
        job_id: str,
        tasks: int = 1,
        iterations: int = 1,
        durations: Durations = 0.001,
        resources: Mapping[str, str] | None = None,
        stage_names: Sequence[str] = STAGE_NAMES,
        time_scale: float = 1.0,
        estimates: bool = False,
        fail_at: Collection[tuple[int, int, str]] = (),
        fail_on: Collection[str] = (),
        crash_at: tuple[int, int, str] | None = None,
        closed_marker: str | os.PathLike | None = None,
    ) -> None:
        roles = {**STAGE_RESOURCES, **(resources or {})}
        missing = [n for n in stage_names if n not in roles]
        if missing:
            raise ValueError(f"no resource given for stage names {missing}")
        if isinstance(durations, Mapping) and any(n not in durations for n in stage_names):
            raise ValueError(
                f"durations lack stage names {[n for n in stage_names if n not in durations]}"
            )
        self._job_id = job_id
        self._durations = durations
        self.time_scale = time_scale
        self.fail_at = set(fail_at)
        self.fail_on = set(fail_on)
        self.crash_at = crash_at
        self.closed_marker = closed_marker
        self._stages: list[Stage] = []
        for task in range(tasks):
            for iteration in range(iterations):
                for name in stage_names:
                    stage = Stage(name, roles[name], task, iteration)
                    if estimates:
                        stage = Stage(name, roles[name], task, iteration, self.duration(stage))
                    self._stages.append(stage)
        self._position = 0
        self.history: list[tuple[Stage, str]] = []

    @property
    def job_id(self) -> str:
        return self._job_id

    def __repr__(self) -> str:
        return f"MockJob({self._job_id!r}, {self._position}/{len(self._stages)} stages)"

    def duration(self, stage: Stage) -> float:
        """Nominal seconds ``stage`` takes."""
        if callable(self._durations):
            return float(self._durations(stage))
        if isinstance(self._durations, Mapping):
            return float(self._durations[stage.name])
        return float(self._durations)

    @property
    def total_stages(self) -> int:
        return len(self._stages)

    def next_stage(self) -> Stage | None:
        return self._stages[self._position] if self._position < len(self._stages) else None

    def run_stage(self, stage: Stage, resource_name: str) -> StageResult:
        self._check(stage)
        seconds = self.duration(stage) * self.time_scale
        if self.crash_at == (stage.task, stage.iteration, stage.name):
            if multiprocessing.parent_process() is None:
                raise RuntimeError("crash_at needs a worker process; it would kill the scheduler")
            time.sleep(seconds / 2)
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(seconds)
        return self.complete_stage(stage, resource_name)

    def complete_stage(self, stage: Stage, resource_name: str) -> StageResult:
        """Finish ``stage`` without taking time: apply faults and move to the next stage."""
        self._check(stage)
        if resource_name in self.fail_on:
            raise RuntimeError(f"{resource_name} is down")
        if (stage.task, stage.iteration, stage.name) in self.fail_at:
            raise RuntimeError(
                f"injected failure in {stage.name} of task {stage.task} iteration {stage.iteration}"
            )
        self.history.append((stage, resource_name))
        self._position += 1
        return StageResult()

    def close(self) -> None:
        if self.closed_marker is not None:
            Path(self.closed_marker).write_text(str(os.getpid()))

    def _check(self, stage: Stage) -> None:
        expected = self.next_stage()
        if stage != expected:
            raise ValueError(f"{self._job_id}: asked to run {stage}, next stage is {expected}")
