"""A sweep: every run of a plan that the experiment's log does not have yet, each one
scheduler job in a process of its own, each recorded as soon as it ends."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .plan import Plan, Run, device_key
from .progress import QuietProgress
from .results import Experiment, RunStatus, make_row, read_context
from .run_job import RunSpec


@dataclass
class SweepSummary:
    experiment: Experiment
    total: int
    skipped: int = 0
    ran: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)
    not_started: int = 0

    @property
    def ok(self) -> bool:
        return not self.failures


def run_sweep(
    plan: Plan,
    *,
    store: str | Path | None = None,
    tracker: tuple[str, int] | None = None,
    fail_fast: bool = False,
    retry_failed: bool = False,
    run_timeout: float | None = None,
    progress_factory: Callable | None = None,
    jobs: int = 1,
    policy: str = "round-robin",
    backend: Any = "processes",
    ray_address: str | None = None,
    job_factory: Callable = RunSpec,
    save_modules: bool = False,
) -> SweepSummary:
    """Run what is left of ``plan``; KeyboardInterrupt stops the runs in flight and
    propagates (the same command resumes them). Failures are in the summary, never raised.

    Every run is one scheduler job from import to evaluation (:mod:`superb.run_job`), in
    a worker process of its own. ``jobs`` = 1 runs them one after another; ``jobs`` > 1
    keeps up to ``jobs`` runs in flight, interleaved by ``policy``, starting the next run
    the moment one ends; the scheduler never lets two stages share a device, so no
    evaluation overlaps another run's profile. ``backend="ray"`` runs the jobs as Ray
    actors: on a local Ray instance started for the sweep, or on the cluster at
    ``ray_address``. ``job_factory(**fields)`` makes each run's job (tests pass fakes).
    ``save_modules``: every run saves its build, for the closing round to time
    (:mod:`superb.final_round`).
    """
    from scheduler.tuning import record_writer
    from simpletvm.remote.local_devices import LocalDevices
    from simpletvm.store import RunStore

    run_store = RunStore(store)
    experiment = Experiment(run_store.superb_dir / plan.grid.name)
    with contextlib.ExitStack() as stack:
        experiment.acquire()
        stack.callback(experiment.release)
        order = [run.key for run in plan.runs]
        state = experiment.state()
        experiment.save_plan(plan)
        experiment.write_csvs(order)  # a sweep killed after logging a row: CSVs catch up
        pending = [run for run in plan.runs if not state.is_complete(run.key, retry_failed)]
        summary = SweepSummary(experiment, len(plan.runs), len(plan.runs) - len(pending))
        summary.failures = [
            row
            for key, row in state.rows.items()
            if key in order and row["status"] != RunStatus.OK and not retry_failed
        ]
        if not pending:
            return summary
        keys = sorted({device_key(plan.resolved_params(run)) for run in pending})
        devices_here = False
        if tracker is None and any(run.tuned for run in pending):
            devices_here = True
            infrastructure = stack.enter_context(
                LocalDevices(
                    sorted({device_key(run.params) for run in pending if run.tuned}),
                    log=experiment.dir / "rpc.log",
                )
            )
            tracker = infrastructure.address
        progress = stack.enter_context(
            (progress_factory or QuietProgress)(
                len(plan.runs),
                summary.skipped,
                ["tuned" if run.tuned else "untuned" for run in pending],
            )
        )
        scheduler = stack.enter_context(_scheduler(keys, jobs, policy, backend, ray_address))
        sweep = _Sweep(
            plan,
            experiment,
            progress,
            state,
            tracker,
            run_store.root,
            project_commit(),
            run_timeout,
            scheduler,
            job_factory,
            summary,
            list(pending),
            jobs,
            fail_fast,
            record_writer(str(run_store.root)) if backend == "ray" else None,
            devices_here=devices_here,
            save_modules=save_modules,
        )
        stack.callback(sweep.stop_timers)
        sweep.start_more()
        trace = scheduler.run(on_stage=sweep.stage_ended, on_job_end=sweep.job_ended)
        note = save_trace(trace, experiment.dir, f"trace-{time.strftime('%Y%m%d-%H%M%S')}")
        if note:
            progress.message(note)
        return summary


def _scheduler(keys: list[str], jobs: int, policy: str, backend: Any, ray_address: str | None):
    """The sweep's scheduler: the client, one device per key, and the backend."""
    from scheduler import Scheduler, client, device
    from scheduler.backends import ProcessBackend, RayBackend

    clients = [client()]
    if backend == "ray":
        backend = RayBackend(ray_address)  # one Ray instance (or cluster connection)
        clients = backend.clients()
    elif backend == "processes":
        # the fork server imports TVM once; every run starts warm from it
        backend = ProcessBackend(
            "forkserver", preload=("superb.run_job", "simpletvm.api", "tvm", "tvm.relax")
        )
    return Scheduler(
        [*clients, *(device(key, key) for key in keys)],
        policy="sequential" if jobs <= 1 else policy,
        backend=backend,
    )


@dataclass
class _Sweep:
    """The runs of one sweep going through its scheduler: started, watched, recorded."""

    plan: Plan
    experiment: Experiment
    progress: Any
    state: Any
    tracker: tuple[str, int] | None
    store_root: Path
    commit: str | None
    run_timeout: float | None
    scheduler: Any
    job_factory: Callable
    summary: SweepSummary
    waiting: list[Run]
    jobs: int
    fail_fast: bool
    records: Callable | None = None  # writes the records jobs return (Ray: no shared FS)
    devices_here: bool = False  # the sweep started the devices, on this machine
    save_modules: bool = False  # every run saves its build (for the closing round)
    in_flight: dict[str, dict[str, Any]] = field(default_factory=dict)
    timers: dict[str, threading.Timer] = field(default_factory=dict)
    stopped: bool = False

    def start_more(self) -> None:
        """Start waiting runs until ``jobs`` are in flight."""
        while self.waiting and len(self.in_flight) < self.jobs and not self.stopped:
            self.start(self.waiting.pop(0))

    def start(self, run: Run) -> None:
        """Choose the run's id (its unfinished attempt's, to resume it), log it, submit."""
        from simpletvm.context import new_run_id

        attempt = self.state.attempts.get(run.key, 0) + 1
        run_id = self.state.resumable_run_id(run.key) or new_run_id()
        params = self.plan.resolved_params(run)
        self.experiment.record_started(run, attempt, run_id, None)
        spec = self.job_factory(
            key=run.key,
            run_id=run_id,
            params=params,
            store=str(self.store_root),
            device_key=device_key(params),
            log=str(self.experiment.log_file(run)),
            attempt=attempt,
            tracker=tuple(self.tracker) if self.tracker else None,
            records_to_driver=self.records is not None,
            devices_here=self.devices_here,
            save_module=self.save_modules,
        )
        self.in_flight[run.key] = {
            "run": run,
            "attempt": attempt,
            "run_id": run_id,
            "started": time.time(),
            "details": None,
        }
        label = run.label(self.plan.varying) or run.label()
        self.progress.start_run(
            run.key, run.index, f"{run.key}  {label}", "tuned" if run.tuned else "untuned"
        )
        if self.run_timeout is not None:
            timer = threading.Timer(
                self.run_timeout,
                self.scheduler.cancel,
                (run.key, f"the run took longer than {self.run_timeout:g} s and was stopped"),
            )
            timer.daemon = True
            timer.start()
            self.timers[run.key] = timer
        self.scheduler.submit(spec, job_id=run.key)

    def stage_ended(self, key: str, record, details: dict[str, Any]) -> None:
        if self.records is not None:
            self.records(key, record, details)
        flight = self.in_flight.get(key)
        if flight is not None and details:
            if flight["details"] is None and details.get("pid"):
                self.experiment.record_running(flight["run"], flight["run_id"], details["pid"])
            flight["details"] = details
        self.progress.stage(key, details)

    def job_ended(self, key: str, outcome) -> None:
        """Record the run's row the moment its job ends, then start the next run."""
        flight = self.in_flight.pop(key)
        timer = self.timers.pop(key, None)
        if timer is not None:
            timer.cancel()
        run, details = flight["run"], flight["details"] or {}
        wall = time.time() - flight["started"]
        status, error = _status(outcome, self.experiment.log_file(run))
        context_path = details.get("context_path") or str(
            self.store_root / "runs" / flight["run_id"] / "context.json"
        )
        context = read_context(context_path)
        result = RunOutcome(
            status,
            error,
            flight["run_id"],
            wall,
            _simpletvm_seconds(context),
            context_path if context else None,
        )
        row = make_row(
            run,
            result,
            context,
            attempt=flight["attempt"],
            started_at=flight["started"],
            commit=self.commit,
        )
        self.experiment.record_finished(row)
        self.experiment.write_csvs([r.key for r in self.plan.runs])
        self.progress.finish_run(key, status, wall, _detail(row))
        self.summary.ran += 1
        if status != RunStatus.OK:
            self.summary.failures.append(row)
            if self.fail_fast and not self.stopped:
                self.stopped = True
                self.summary.not_started = len(self.waiting)
        self.start_more()

    def stop_timers(self) -> None:
        for timer in self.timers.values():
            timer.cancel()


@dataclass
class RunOutcome:
    """How one run ended, as its row records it."""

    status: RunStatus
    error: str | None
    run_id: str
    wall_s: float
    simpletvm_s: float | None = None
    context_path: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == RunStatus.OK


def _status(outcome, log: Path) -> tuple[RunStatus, str | None]:
    """How the run's job ended, as the run's status and error: a stage's own error, how
    the run's process died (with its last output), the timeout, or else the scheduler's
    account of the failure."""
    from scheduler import FailureCause, JobStatus

    if outcome.status == JobStatus.DONE:
        return RunStatus.OK, None
    failure = outcome.failure
    if failure.cause == FailureCause.CANCELLED:
        return RunStatus.TIMEOUT, failure.message
    if failure.cause == FailureCause.WORKER:
        last = _last_line(log)
        text = f"the run's process died ({failure.message})"
        return RunStatus.CRASHED, f"{text}; last output: {last}" if last else text
    if failure.cause == FailureCause.STAGE:
        return RunStatus.FAILED, failure.message
    return RunStatus.FAILED, str(failure)


def _simpletvm_seconds(context: dict[str, Any] | None) -> float | None:
    """Time inside SimpleTVM's steps, from the run's context."""
    if not context:
        return None
    steps = context.get("steps") or []
    return sum(step.get("duration_s") or 0.0 for step in steps) or None


def _last_line(path: Path, limit: int = 300) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 8192))
            lines = [
                line.strip()
                for line in handle.read().decode(errors="replace").splitlines()
                if line.strip()
            ]
    except OSError:
        return ""
    last = lines[-1] if lines else ""
    return last if len(last) <= limit else last[: limit - 3] + "..."


def _detail(row: dict[str, Any]) -> str:
    if row["status"] != RunStatus.OK:
        return f": {row['error']}"
    parts = []
    if row.get("trials"):
        parts.append(f"{row['trials']} trials in {row['tuning_s']:.1f} s")
    if row.get("eval_median_ms") is not None:
        parts.append(f"median {row['eval_median_ms']:.3f} ms")
    return f" ({', '.join(parts)})" if parts else ""


def project_commit() -> str | None:
    """The SimpleTVM checkout's commit (``-dirty`` with local changes), if it is one."""
    import simpletvm

    try:
        result = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--abbrev=12"],
            cwd=Path(simpletvm.__file__).parent,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0:
        return None
    return result.stdout.strip() or None


def save_trace(trace, directory: Path, name: str) -> str | None:
    """Write ``<name>.csv`` and, when matplotlib is installed, the Gantt chart
    ``<name>.png``; returns a note for the user when the chart was skipped (a plain
    ``pip install .`` has no matplotlib, and a finished tuning must not die of a plot)."""
    trace.to_csv(directory / f"{name}.csv")
    try:
        trace.gantt_png(directory / f"{name}.png")
    except ImportError as error:
        return f"{name}.png skipped: {error}; {name}.csv holds the same trace"
    return None
