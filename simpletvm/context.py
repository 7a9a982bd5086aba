"""BenchmarkingContext: everything one SimpleTVM execution did, under one run id.

It records what ran (steps, every autotuning stage), where (target, device key, host),
with what (parameters, library versions) and how fast (wall times, evaluation samples),
and saves it as JSON in the run store so a notebook or superb can read it back later.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from simpletvm._process.interrupts import keep_interrupts
from simpletvm._process.native_output import redirected, verbose
from simpletvm.errors import RunNotFoundError
from simpletvm.hostinfo import host_facts, library_versions
from simpletvm.store import HOME_ENV, RunStore, atomic_write_json

SCHEMA_VERSION = 1


def new_run_id() -> str:
    """32 lowercase alphanumeric characters, unique per execution."""
    return uuid.uuid4().hex


def _now() -> float:
    return time.time()


class StepStatus(StrEnum):
    """How a step ended, as its record in context.json says."""

    OK = "ok"
    ERROR = "error"


class BenchmarkingContext:
    """The record of one run: target, host, model, parameters, steps, stages, results.

    Args:
        target: ``"cpu"`` (the local CPU through LLVM), ``"cuda"``, or a TVM target dict.
        device_key: the RPC tracker key of the target device, when profiling remotely.
        cpu_arch: LLVM CPU name (``"skylake"``, ``"znver3"``...) so TVM picks the right
            vector instructions; the host's own CPU when not given.
        num_threads: threads for the tuned module and for tuning (default: physical cores
            for tuning; a module built or loaded for this CPU runs on the faster of them
            and one, timed then: :mod:`simpletvm.runtime.threads`).
        store: a RunStore or its root directory (default ``~/tvm-benchmark``).
    """

    def __init__(
        self,
        target: str | dict = "cpu",
        device_key: str | None = None,
        cpu_arch: str | None = None,
        *,
        num_threads: int | None = None,
        store: RunStore | str | Path | None = None,
        run_id: str | None = None,
    ):
        self.run_id = run_id or new_run_id()
        self.store = store if isinstance(store, RunStore) else RunStore(store)
        self.target = target
        self.device_key = device_key
        self.cpu_arch = cpu_arch
        self.num_threads = num_threads
        self.created_at = datetime.now(UTC).isoformat()
        self.target_spec: dict | None = None
        self.host = host_facts()
        self.versions = library_versions()
        self.model: dict[str, Any] = {}
        self.parameters: dict[str, dict[str, Any]] = {}
        self.steps: list[dict[str, Any]] = []
        self.stages: list[dict[str, Any]] = []
        self.tuning: dict[str, Any] = {}
        self.evaluation: dict[str, Any] = {}
        self.artifacts: dict[str, str] = {}
        # what made the run (a CLI command's name: tune, compile, benchmark...; None from
        # Python) and how it ended: "running", "ok", "failed" or "interrupted" (None: "ok",
        # or "failed" when a step failed, as saved)
        self.kind: str | None = None
        self.status: str | None = None
        self.results: dict[str, Any] = {}  # what a command measured besides evaluate()
        self._logger: logging.Logger | None = None
        self._tallies: dict[str, dict[str, Any]] = {}  # step name -> its one record

    def __repr__(self) -> str:
        return f"BenchmarkingContext(run_id={self.run_id!r}, target={self.target!r})"

    @property
    def run_dir(self) -> Path:
        return self.store.run_dir(self.run_id)

    @property
    def logger(self) -> logging.Logger:
        """A logger writing to this run's ``run.log`` (created on first use)."""
        if self._logger is None:
            logger = logging.getLogger(f"simpletvm.run.{self.run_id}")
            logger.setLevel(logging.DEBUG)
            logger.propagate = False
            self.run_dir.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(self.store.log_path(self.run_id), encoding="utf-8")
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            logger.addHandler(handler)
            self._logger = logger
        return self._logger

    @contextlib.contextmanager
    def step(self, name: str, **details: Any) -> Iterator[dict[str, Any]]:
        """Time one SimpleTVM step; the yielded dict takes details found while it runs."""
        record: dict[str, Any] = {"step": name, "start": _now(), "status": StepStatus.OK, **details}
        self.logger.info("step %s started", name)
        native = (
            contextlib.nullcontext()
            if verbose()
            else redirected(self.store.log_path(self.run_id), keep_python=True)
        )
        try:
            with native, keep_interrupts():  # Ctrl-C inside TVM stays an interrupt
                yield record
        except BaseException as error:
            record["status"] = StepStatus.ERROR
            record["error"] = f"{type(error).__name__}: {error}"
            raise
        finally:
            record["end"] = _now()
            record["duration_s"] = record["end"] - record["start"]
            self.steps.append(record)
            self.logger.info("step %s %s in %.3f s", name, record["status"], record["duration_s"])

    @contextlib.contextmanager
    def tally(self, name: str, **details: Any) -> Iterator[dict[str, Any]]:
        """A step called in a loop (``run()``: inference): one record per name, made at
        its first call, counting the calls (``calls``) and summing their time; the first
        call logged, the last failure kept (``error``). Unlike :meth:`step`, no log lines
        and no redirection of native output per call: those cost a model of milliseconds
        a tenth of its time a call (BENCHMARKS.md), and a serving loop would grow the log
        and the steps without end."""
        record = self._tallies.get(name)
        if record is None:
            record = {"step": name, "start": _now(), "status": StepStatus.OK, "calls": 0}
            record.update(details, duration_s=0.0)
            self._tallies[name] = record
            self.steps.append(record)
            self.logger.info("step %s first called", name)
        start = time.perf_counter()
        try:
            with keep_interrupts():  # Ctrl-C inside TVM stays an interrupt
                yield record
        except BaseException as error:
            record["status"] = StepStatus.ERROR
            record["error"] = f"{type(error).__name__}: {error}"
            self.logger.info("step %s failed: %s", name, record["error"])
            raise
        finally:
            record["calls"] += 1
            record["duration_s"] += time.perf_counter() - start
            record["end"] = _now()

    def record_parameters(self, step: str, **values: Any) -> None:
        self.parameters[step] = {k: v for k, v in values.items()}

    def record_stage(
        self,
        *,
        task: int,
        task_name: str,
        iteration: int,
        stage: str,
        resource: str,
        start: float,
        end: float,
        **extra: Any,
    ) -> None:
        """One autotuning stage execution (select, build, profile or update)."""
        self.stages.append(
            {
                "task": task,
                "task_name": task_name,
                "iteration": iteration,
                "stage": stage,
                "resource": resource,
                "start": start,
                "end": end,
                "duration_s": end - start,
                **extra,
            }
        )

    def step_durations(self) -> dict[str, float]:
        """Total wall time per step name."""
        totals: dict[str, float] = {}
        for record in self.steps:
            totals[record["step"]] = totals.get(record["step"], 0.0) + record["duration_s"]
        return totals

    def stage_durations(self) -> dict[str, float]:
        """Total wall time per autotuning stage kind."""
        totals: dict[str, float] = {}
        for record in self.stages:
            totals[record["stage"]] = totals.get(record["stage"], 0.0) + record["duration_s"]
        return totals

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "run_id": self.run_id,
            "created_at": self.created_at,
            "target": self.target,
            "target_spec": self.target_spec,
            "device_key": self.device_key,
            "cpu_arch": self.cpu_arch,
            "num_threads": self.num_threads,
            "host": self.host,
            "versions": self.versions,
            "model": self.model,
            "parameters": self.parameters,
            "steps": self.steps,
            "stages": self.stages,
            "tuning": self.tuning,
            "evaluation": self.evaluation,
            "artifacts": self.artifacts,
            "kind": self.kind,
            "status": self.status
            or ("failed" if any(s["status"] == StepStatus.ERROR for s in self.steps) else "ok"),
            "pid": os.getpid(),
            "results": self.results,
        }

    def discard(self) -> None:
        """Remove the run's directory (its log included): for a run that did nothing
        worth keeping (a command refused its input, or ran a saved module)."""
        if self._logger is not None:
            for handler in list(self._logger.handlers):
                handler.close()
                self._logger.removeHandler(handler)
            self._logger = None
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def save(self, path: str | Path | None = None) -> Path:
        """Write the context as JSON (atomically); default ``runs/<run_id>/context.json``."""
        target = Path(path) if path is not None else self.store.context_path(self.run_id)
        atomic_write_json(target, self.to_dict())
        self.logger.info("context saved to %s", target)
        return target

    @classmethod
    def from_dict(cls, data: dict[str, Any], store: RunStore | str | Path | None = None):
        ctx = cls(
            data["target"],
            data.get("device_key"),
            data.get("cpu_arch"),
            num_threads=data.get("num_threads"),
            store=store,
            run_id=data["run_id"],
        )
        for key in (
            "created_at",
            "target_spec",
            "host",
            "versions",
            "model",
            "parameters",
            "steps",
            "stages",
            "tuning",
            "evaluation",
            "artifacts",
            "kind",
            "status",
            "results",
        ):
            if key in data:
                setattr(ctx, key, data[key])
        return ctx

    @classmethod
    def load(cls, run_id_or_path: str | Path, store: RunStore | str | Path | None = None):
        """Load a saved context by run id (from the store) or by the JSON file's path."""
        store = store if isinstance(store, RunStore) else RunStore(store)
        path = Path(run_id_or_path)
        if not path.suffix == ".json":
            path = store.context_path(str(run_id_or_path))
        if not path.exists():
            raise RunNotFoundError(
                f"no saved context at {path}: check the run id, or pass the store root "
                f"the run was saved under (store=..., or ${HOME_ENV})"
            )
        with open(path, encoding="utf-8") as handle:
            return cls.from_dict(json.load(handle), store=store)


def describe_run(store: RunStore, run_id: str) -> dict[str, Any]:
    """What a list of runs shows of one: id, kind, status, model, latency (the
    evaluation's median, or a benchmark's tuned median), date, tasks and trials, from its
    context.json. A run without one recorded nothing ("empty": a context made and used,
    never saved), dated by its directory."""
    try:
        data = json.loads(store.context_path(run_id).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        data = None
    if not isinstance(data, dict):
        try:
            mtime = store.run_dir(run_id).stat().st_mtime
            created = datetime.fromtimestamp(mtime, UTC).isoformat()
        except OSError:
            created = None
        return {
            "run_id": run_id,
            "kind": None,
            "status": "empty",
            "model": None,
            "latency_ms": None,
            "created_at": created,
            "tasks": None,
            "trials": None,
        }
    status = data.get("status") or (
        "failed" if any(s.get("status") == "error" for s in data.get("steps", [])) else "ok"
    )
    if status == "running" and not _alive(data.get("pid"), data.get("host", {})):
        status = "interrupted"  # its process is gone: killed before it could say so
    evaluation = data.get("evaluation") or {}
    benchmark = (data.get("results") or {}).get("benchmark") or {}
    model = data.get("model") or {}
    return {
        "run_id": run_id,
        "kind": data.get("kind") or ("tune" if data.get("tuning") else "python"),
        "status": status,
        "model": model.get("source"),
        "latency_ms": evaluation.get("median_ms", benchmark.get("tuned_median_ms")),
        "created_at": data.get("created_at"),
        "tasks": model.get("num_tasks"),
        "trials": (data.get("tuning") or {}).get("trials"),
    }


def _alive(pid, host: dict) -> bool:
    """Whether the process that saved a run as running still runs (on this host; a run
    of another host is taken at its word)."""
    import socket

    if not pid or host.get("hostname") not in (None, socket.gethostname()):
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError, OverflowError):
        return True
    return True
