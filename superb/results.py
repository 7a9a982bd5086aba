"""An experiment's records: the append-only run log, runs.csv, aggregate.csv, and the
per-execution stages.csv and curves.csv.

The log (``log.jsonl``) is the truth: a ``started`` line when a run begins and a
``finished`` line with its row when it ends, appended under a lock. Replaying it after a
restart tells which runs are complete (skip), which started but never finished (rerun),
and the CSVs are rebuilt from it with one row per run key (stages.csv and curves.csv from
the context.json its rows name), so nothing is duplicated or lost whenever superb was
killed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from simpletvm.store import (
    RunStore,
    append_lines,
    atomic_write_json,
    atomic_write_text,
    file_lock,
    read_json_lines,
)
from simpletvm.tuning.plan import STAGES  # the tuning stages' one definition

from .errors import SuperbError
from .plan import Plan, Run

EVALUATION = ("count", "mean", "median", "std", "min", "max", "p90")

# runs.csv: these columns, with one param:<name> column per parameter after "run_id"
LEAD_COLUMNS = ["run", "index", "repetition", "run_id"]
RESULT_COLUMNS = (
    [
        "status",
        "error",
        "attempt",
        "started_at",
        "wall_s",
        "overhead_s",
        "from_model_s",
        "tuning_s",
        "build_s",
        "save_s",
        "evaluate_s",
        "num_tasks",
        "trials",
        "tuning_errors",
        "estimated_latency_ms",
        "search_estimated_latency_ms",
    ]
    + [f"{stage}_mean_s" for stage in STAGES]
    + [f"{stage}_count" for stage in STAGES]
    + [f"eval_{name}_ms" if name != "count" else "eval_count" for name in EVALUATION]
    + [
        "max_rel_error",
        "tuned",
        "records",
        "target",
        "device_key",
        "hostname",
        "cpu_model",
        "tvm_version",
        "simpletvm_version",
        "commit",
        "context",
    ]
)
# aggregate.csv: per parameter combination, means over the ok runs
AGGREGATE_MEANS = (
    ["tuning_s"]
    + [f"{stage}_mean_s" for stage in STAGES]
    + ["trials", "eval_mean_ms", "eval_median_ms", "eval_p90_ms"]
)
# stages.csv and curves.csv: the run's key, then one row per tuning stage execution of
# the run (start, end: Unix time), or per point of its curve (simpletvm.tuning.curve)
RUN_KEY_COLUMNS = ["run", "run_id"]
STAGE_FIELDS = ["task", "task_name", "iteration", "stage", "resource", "start", "end", "duration_s"]


class RunStatus(StrEnum):
    """How a run ended, as its row's ``status`` says."""

    OK = "ok"
    FAILED = "failed"  # SimpleTVM raised (the error names what)
    CRASHED = "crashed"  # its process died
    TIMEOUT = "timeout"  # stopped at --run-timeout


class ExperimentBusy(SuperbError):
    """Another superb process is running this experiment."""


@dataclass
class LogState:
    """What the log says: finished rows by key, attempts so far, runs left unfinished."""

    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    attempts: dict[str, int] = field(default_factory=dict)
    unfinished: set[str] = field(default_factory=set)
    run_ids: dict[str, str] = field(default_factory=dict)  # the last attempt's, by key

    def resumable_run_id(self, key: str) -> str | None:
        """The run id of ``key``'s attempt that started and never finished: a rerun
        continues it (its tuning records, its context) instead of starting afresh."""
        return self.run_ids.get(key) if key in self.unfinished else None

    def is_complete(self, key: str, retry_failed: bool = False) -> bool:
        row = self.rows.get(key)
        return row is not None and (row["status"] == RunStatus.OK or not retry_failed)


class Experiment:
    """The directory of one sweep: ``<store>/superb/<name>/``."""

    def __init__(self, directory: str | Path):
        self.dir = Path(directory)
        self.log_path = self.dir / "log.jsonl"
        self.runs_csv = self.dir / "runs.csv"
        self.aggregate_csv = self.dir / "aggregate.csv"
        self.stages_csv = self.dir / "stages.csv"
        self.curves_csv = self.dir / "curves.csv"
        self.plan_path = self.dir / "plan.json"
        self.logs_dir = self.dir / "logs"
        self._lock = None
        self._executions: dict[tuple, tuple[list, list]] = {}

    @classmethod
    def find(cls, name_or_dir: str | Path, store: str | Path | None = None) -> Experiment:
        """An experiment by directory, or by name under the store's superb folder."""
        path = Path(name_or_dir)
        if not (path / "log.jsonl").exists() and not (path / "runs.csv").exists():
            path = RunStore(store).superb_dir / str(name_or_dir)
        if not (path / "log.jsonl").exists() and not (path / "runs.csv").exists():
            raise FileNotFoundError(
                f"no superb experiment at {name_or_dir!r} (looked for log.jsonl or runs.csv "
                f"there and under {RunStore(store).superb_dir})"
            )
        return cls(path)

    # ---- the lock: one superb per experiment ---------------------------------------
    def acquire(self) -> None:
        from filelock import Timeout

        self.dir.mkdir(parents=True, exist_ok=True)
        lock = file_lock(self.dir / "superb")
        try:
            lock.acquire(timeout=0)
        except Timeout as error:
            raise ExperimentBusy(
                f"another superb is running the experiment in {self.dir}: "
                "wait for it, or stop it first"
            ) from error
        self._lock = lock

    def release(self) -> None:
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    # ---- the log --------------------------------------------------------------------
    def state(self) -> LogState:
        state = LogState()
        for event in read_json_lines(self.log_path):
            if not isinstance(event, dict) or "run" not in event:
                continue
            key = event["run"]
            if event.get("event") == "started":
                state.attempts[key] = max(state.attempts.get(key, 0), event.get("attempt", 1))
                state.unfinished.add(key)
                if event.get("run_id"):
                    state.run_ids[key] = event["run_id"]
            elif event.get("event") == "finished" and isinstance(event.get("row"), dict):
                state.rows[key] = event["row"]  # a retried run: the last row wins
                state.unfinished.discard(key)
        return state

    def record_started(self, run: Run, attempt: int, run_id: str, pid: int | None) -> None:
        self._append(
            {
                "event": "started",
                "run": run.key,
                "attempt": attempt,
                "run_id": run_id,
                "pid": pid,
                "time": time.time(),
            }
        )

    def record_running(self, run: Run, run_id: str, pid: int) -> None:
        """The process that holds the run (known once its job has run a stage)."""
        self._append(
            {"event": "running", "run": run.key, "run_id": run_id, "pid": pid, "time": time.time()}
        )

    def record_finished(self, row: dict[str, Any]) -> None:
        self._append({"event": "finished", "run": row["run"], "row": row, "time": time.time()})

    def record_final_round(self, event: dict[str, Any]) -> None:
        """One round of the closing round (:mod:`superb.final_round`): no run's event."""
        self._append(event)

    def _append(self, event: dict[str, Any]) -> None:
        append_lines(self.log_path, [json.dumps(event, default=str, separators=(",", ":"))])

    def save_plan(self, plan: Plan) -> None:
        atomic_write_json(self.plan_path, plan.to_json())

    def log_file(self, run: Run) -> Path:
        return self.logs_dir / f"{run.index:04d}-{run.key}.log"

    # ---- the CSVs -------------------------------------------------------------------
    def write_csvs(self, order: list[str] | None = None, by: list[str] | None = None):
        """Rebuild runs.csv (one row per finished run, plan order first) and
        aggregate.csv from the log, and stages.csv and curves.csv from the contexts of
        its runs; returns the runs and aggregate frames."""
        frame = runs_frame(self.state().rows.values(), order)
        atomic_write_text(self.runs_csv, frame.to_csv(index=False))
        aggregated = aggregate(frame, by)
        atomic_write_text(self.aggregate_csv, aggregated.to_csv(index=False))
        stages, curves = self.execution_frames(frame)
        atomic_write_text(self.stages_csv, stages.to_csv(index=False))
        atomic_write_text(self.curves_csv, curves.to_csv(index=False))
        return frame, aggregated

    def execution_frames(self, runs):
        """The stages.csv and curves.csv frames of ``runs`` (a runs.csv frame), in its
        order. A run whose context.json cannot be read (an experiment copied without its
        run store) keeps the rows the CSVs have for it now."""
        import pandas as pd

        from simpletvm.tuning.curve import CURVE_COLUMNS

        stage_rows: list[dict[str, Any]] = []
        curve_rows: list[dict[str, Any]] = []
        earlier = None
        for run, run_id, path in runs[["run", "run_id", "context"]].itertuples(index=False):
            executions = self._executions_of(path)
            if executions is None:
                earlier = earlier or self._rows_by_run()
                executions = tuple(rows.get((run, run_id), []) for rows in earlier)
            stages, curve = executions
            key = {"run": run, "run_id": run_id}
            stage_rows += [{**key, **stage} for stage in stages]
            curve_rows += [{**key, **point} for point in curve]
        return (
            pd.DataFrame(stage_rows, columns=RUN_KEY_COLUMNS + STAGE_FIELDS),
            pd.DataFrame(curve_rows, columns=RUN_KEY_COLUMNS + CURVE_COLUMNS),
        )

    def _executions_of(self, context_path) -> tuple[list, list] | None:
        """A run's stage executions and tuning curve points from its context.json (None
        if unreadable), remembered while the file is unchanged: the CSVs are rebuilt
        after every run."""
        from simpletvm.tuning.curve import tuning_curve

        if not isinstance(context_path, str):
            return None
        try:
            stat = Path(context_path).stat()
        except OSError:
            return None
        version = (context_path, stat.st_mtime_ns, stat.st_size)
        if version not in self._executions:
            context = read_context(context_path)
            if context is None:
                return None
            stages = [
                {field: stage.get(field) for field in STAGE_FIELDS}
                for stage in context.get("stages", [])
            ]
            self._executions[version] = (stages, tuning_curve(context).to_dict("records"))
        return self._executions[version]

    def _rows_by_run(self) -> tuple[dict, dict]:
        """The rows of stages.csv and curves.csv as they are, by (run, run_id)."""
        import pandas as pd

        tables = []
        for path in (self.stages_csv, self.curves_csv):
            rows: dict[tuple[str, str], list[dict[str, Any]]] = {}
            if path.exists():
                frame = pd.read_csv(path, dtype={"run": str, "run_id": str})
                for row in frame.to_dict("records"):
                    rows.setdefault((row.pop("run"), row.pop("run_id")), []).append(row)
            tables.append(rows)
        return tables[0], tables[1]

    def read_runs(self):
        """runs.csv as a frame: rebuilt from the log when there is one."""
        import pandas as pd

        if self.log_path.exists():
            return runs_frame(self.state().rows.values())
        return pd.read_csv(self.runs_csv)


# ---- rows -----------------------------------------------------------------------------


def make_row(
    run: Run,
    outcome,
    context: dict[str, Any] | None,
    *,
    attempt: int,
    started_at: float,
    commit: str | None,
) -> dict[str, Any]:
    """One runs.csv row: the run's parameters, its outcome and what its context recorded."""
    row: dict[str, Any] = {
        "run": run.key,
        "index": run.index,
        "repetition": run.repetition,
        "run_id": outcome.run_id,
    }
    row.update({f"param:{name}": _cell(value) for name, value in run.params.items()})
    row.update(
        status=outcome.status,
        error=outcome.error,
        attempt=attempt,
        started_at=datetime.fromtimestamp(started_at, UTC).isoformat(timespec="seconds"),
        wall_s=outcome.wall_s,
        overhead_s=(
            outcome.wall_s - outcome.simpletvm_s if outcome.simpletvm_s is not None else None
        ),
        commit=commit,
        context=outcome.context_path,
    )
    if context:
        row.update(context_columns(context))
    return row


def read_context(path: str | None) -> dict[str, Any] | None:
    """A run's saved context.json; None when there is none or it cannot be read."""
    if not path:
        return None
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def context_columns(context: dict[str, Any]) -> dict[str, Any]:
    """The columns a saved BenchmarkingContext fills."""
    steps: dict[str, float] = {}
    for step in context.get("steps", []):
        steps[step["step"]] = steps.get(step["step"], 0.0) + step["duration_s"]
    stages: dict[str, list[float]] = {stage: [] for stage in STAGES}
    for stage in context.get("stages", []):
        stages.setdefault(stage["stage"], []).append(stage["duration_s"])
    tuning = context.get("tuning") or {}
    evaluation = context.get("evaluation") or {}
    spec = context.get("target_spec") or {}
    columns: dict[str, Any] = {
        "from_model_s": steps.get("from_model"),
        "tuning_s": steps.get("autotune"),
        "build_s": steps.get("build"),
        "save_s": steps.get("save"),
        "evaluate_s": steps.get("evaluate"),
        "num_tasks": tuning.get("num_tasks", (context.get("model") or {}).get("num_tasks")),
        "trials": tuning.get("trials"),
        "tuning_errors": tuning.get("errors"),
        "estimated_latency_ms": (
            tuning["estimated_latency_s"] * 1e3 if tuning.get("estimated_latency_s") else None
        ),
        "search_estimated_latency_ms": (
            tuning["search_estimated_latency_s"] * 1e3
            if tuning.get("search_estimated_latency_s")
            else None
        ),
        # the build's outputs against the source framework's (SimpleTVM.check_answers)
        "max_rel_error": evaluation.get("max_rel_error"),
        "tuned": evaluation.get("tuned"),
        "records": evaluation.get("records"),
        "target": _target_text(spec) or _cell(context.get("target")),
        "device_key": tuning.get("device_key") or context.get("device_key"),
        "hostname": (context.get("host") or {}).get("hostname"),
        "cpu_model": (context.get("host") or {}).get("cpu_model"),
        "tvm_version": (context.get("versions") or {}).get("apache-tvm"),
        "simpletvm_version": (context.get("versions") or {}).get("simpletvm"),
    }
    for stage in STAGES:
        durations = stages.get(stage) or []
        columns[f"{stage}_mean_s"] = sum(durations) / len(durations) if durations else None
        columns[f"{stage}_count"] = len(durations) if durations else None
    for name in EVALUATION:
        column = "eval_count" if name == "count" else f"eval_{name}_ms"
        columns[column] = evaluation.get("count" if name == "count" else f"{name}_ms")
    return columns


def runs_frame(rows, order: list[str] | None = None):
    """Rows as a frame with the fixed column order; plan order first, then the rest."""
    import pandas as pd

    rows = list(rows)
    params: list[str] = []
    for row in rows:
        params += [c for c in row if c.startswith("param:") and c not in params]
    columns = LEAD_COLUMNS + params + RESULT_COLUMNS
    frame = pd.DataFrame(rows, columns=columns)
    if order:
        position = {key: i for i, key in enumerate(order)}
        frame["_order"] = frame["run"].map(lambda k: position.get(k, len(position)))
        frame = frame.sort_values(["_order", "index"], kind="stable").drop(columns="_order")
    return frame.reset_index(drop=True)


def aggregate(frame, by: list[str] | None = None):
    """Per parameter combination (``by``: parameter names; None: all of them; []: one
    group): run counts and the means, over ok runs, of tuning time, each stage's mean
    time, trials and latency, and the spread of the median latency."""
    import pandas as pd

    params = [c for c in frame.columns if c.startswith("param:")]
    if by is not None:
        unknown = [name for name in by if f"param:{name}" not in params]
        if unknown:
            raise ValueError(
                f"cannot group by {unknown}: the runs have parameters {[c[6:] for c in params]}"
            )
        params = [f"param:{name}" for name in by]
    columns = params + ["runs", "ok", "failed"] + AGGREGATE_MEANS + ["eval_median_ms_std"]
    if frame.empty:
        return pd.DataFrame(columns=columns)
    work = frame.copy()
    work["_ok"] = work["status"] == RunStatus.OK
    if not params:
        work["_all"] = "all"
    keys = params or ["_all"]
    for column in AGGREGATE_MEANS:
        work[column] = pd.to_numeric(work[column], errors="coerce").where(work["_ok"])
    grouped = work.groupby(keys, dropna=False, sort=False)
    result = grouped.agg(
        runs=("run", "size"),
        ok=("_ok", "sum"),
        **{c: (c, "mean") for c in AGGREGATE_MEANS},
        eval_median_ms_std=("eval_median_ms", "std"),
    ).reset_index()
    result["failed"] = result["runs"] - result["ok"]
    return result.drop(columns=["_all"], errors="ignore")[columns]


def _cell(value: Any) -> Any:
    """CSV cells hold scalars; mappings and lists are written as JSON."""
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return value


def _target_text(spec: dict[str, Any]) -> str | None:
    if not spec:
        return None
    parts = [spec.get("kind", "?")] + [
        f"-{k}={v}"
        for k, v in sorted(spec.items())
        if k not in ("kind", "host") and not isinstance(v, dict)
    ]
    return " ".join(str(p) for p in parts)
