"""A sweep: every run of a plan that the experiment's log does not have yet, one after
another, each isolated, each recorded as soon as it ends."""

from __future__ import annotations

import contextlib
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .plan import Plan, Run, device_key
from .progress import QuietProgress
from .results import Experiment, make_row, read_context


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


def run_sweep(plan: Plan, *, store: str | Path | None = None,
              tracker: tuple[str, int] | None = None, fail_fast: bool = False,
              retry_failed: bool = False, run_timeout: float | None = None,
              progress_factory: Callable | None = None, runner=None, jobs: int = 1,
              policy: str = "round-robin", backend: str = "processes",
              ray_address: str | None = None) -> SweepSummary:
    """Run what is left of ``plan``; KeyboardInterrupt stops the current run and
    propagates (the same command resumes). Failures are in the summary, never raised.

    With ``jobs`` > 1, the tuning of up to ``jobs`` runs at a time goes through the
    scheduler (``policy``), which interleaves their stages and never lets two profile on
    one device; each run's build and evaluation then run one after another as usual.
    ``backend="ray"`` runs those jobs as Ray actors: on a local Ray instance started for
    the sweep, or on the cluster at ``ray_address``."""
    from simpletvm.store import RunStore

    from .infra import LocalInfrastructure
    from .runner import IsolatedRunner

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
        summary.failures = [row for key, row in state.rows.items()
                            if key in order and row["status"] != "ok" and not retry_failed]
        if not pending:
            return summary
        keys = sorted({device_key(run.params) for run in pending if run.tuned})
        if keys and tracker is None:
            infrastructure = stack.enter_context(
                LocalInfrastructure(keys, log=experiment.dir / "rpc.log"))
            tracker = infrastructure.address
        if backend == "ray" and jobs > 1:
            from scheduler import RayBackend

            # one Ray instance (or cluster connection) for the sweep; every batch reuses it
            stack.callback(RayBackend(ray_address).close)
        runner = runner or IsolatedRunner()
        runner.wait_ready()
        kinds = ["tuned" if run.tuned else "untuned" for run in pending]
        progress = stack.enter_context(
            (progress_factory or QuietProgress)(len(plan.runs), summary.skipped, kinds))
        sweep = _Sweep(plan, experiment, runner, progress, state, tracker, run_store.root,
                       project_commit(), run_timeout, backend)
        pretuned: dict[str, str] = {}
        for number, run in enumerate(pending):
            if jobs > 1 and run.tuned and run.key not in pretuned:
                batch = [r for r in pending[number:] if r.tuned][:jobs]
                pretuned.update(sweep.tune_together(batch, policy))
            row = sweep.run(run, pretuned.get(run.key))
            summary.ran += 1
            if row["status"] != "ok":
                summary.failures.append(row)
                if fail_fast:
                    summary.not_started = len(pending) - number - 1
                    break
        return summary


@dataclass
class _Sweep:
    """What every run of one sweep shares."""

    plan: Plan
    experiment: Experiment
    runner: Any
    progress: Any
    state: Any
    tracker: tuple[str, int] | None
    store_root: Path
    commit: str | None
    run_timeout: float | None
    backend: str = "processes"

    def tune_together(self, runs: list[Run], policy: str) -> dict[str, str]:
        """Tune ``runs`` through the scheduler; returns {run key: run id} of the runs
        whose tuning finished (the others tune again in their own run)."""
        from scheduler import RayBackend, Scheduler, client, device
        from scheduler.tuning import TuningJobSpec
        from simpletvm.context import new_run_id

        from .grid import calls_for

        specs = {}
        for run in runs:
            params = self.plan.resolved_params(run)
            calls = calls_for(params)
            context, model = dict(calls["context"]), dict(calls["from_model"])
            specs[run.key] = TuningJobSpec(
                run.key, model.pop("source"), tuple(self.tracker), device_key(params),
                target=context.pop("target"), store=str(self.store_root), run_id=new_run_id(),
                context_options=context, model_options=model, tuning=calls["autotune"])
        keys = sorted({spec.device_key for spec in specs.values()})
        self.progress.message(f"tuning {len(runs)} runs together ({policy}, {self.backend}): "
                              + ", ".join(specs))
        if self.backend == "ray":
            backend = RayBackend()  # the sweep's Ray connection; one client slot per node
            clients = backend.clients()
        else:
            backend, clients = "processes", [client()]
        with Scheduler([*clients, *(device(key, key) for key in keys)], policy=policy,
                       backend=backend) as scheduler:
            for spec in specs.values():
                scheduler.submit(spec)
            trace = scheduler.run()
        note = save_trace(trace, self.experiment.dir, f"trace-{min(specs)}")
        if note:
            self.progress.message(note)
        return {key: specs[key].run_id for key in specs if key not in trace.failed}

    def run(self, run: Run, pretuned_run_id: str | None = None) -> dict[str, Any]:
        """Run one combination in its own process and record its row."""
        from simpletvm.context import new_run_id

        attempt = self.state.attempts.get(run.key, 0) + 1
        run_id = pretuned_run_id or new_run_id()
        params = self.plan.resolved_params(run)
        spec = {"key": run.key, "attempt": attempt, "run_id": run_id, "params": params,
                "pretuned": pretuned_run_id is not None,
                "store": str(self.store_root),
                "rpc_tracker": list(self.tracker) if self.tracker else None,
                "device_key": device_key(params), "log": str(self.experiment.log_file(run))}
        label = run.label(self.plan.varying) or run.label()
        self.progress.start_run(run.index, f"{run.key}  {label}")
        started = time.time()
        outcome = self.runner.run(
            spec, on_event=self.progress.event, timeout=self.run_timeout,
            on_start=lambda pid: self.experiment.record_started(run, attempt, run_id, pid))
        row = make_row(run, outcome, read_context(outcome.context_path), attempt=attempt,
                       started_at=started, commit=self.commit)
        self.experiment.record_finished(row)
        self.experiment.write_csvs([r.key for r in self.plan.runs])
        self.progress.finish_run(outcome.status, outcome.wall_s, _detail(row))
        return row


def _detail(row: dict[str, Any]) -> str:
    if row["status"] != "ok":
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
            cwd=Path(simpletvm.__file__).parent, capture_output=True, text=True, timeout=5)
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
