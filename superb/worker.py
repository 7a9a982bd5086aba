"""One run, in a process of its own: what the child does with SimpleTVM.

The runner forks children from a server process that imported this module (and TVM)
once, so a run starts in milliseconds, and a crash of TVM ends only its own child.
The child writes its output to the run's log file, reports progress and its result to
the parent through a pipe, and saves its BenchmarkingContext even when a step fails.

``python -m superb.worker SPEC.json`` runs one spec in the foreground, for debugging.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import time
import traceback
from typing import Any, Callable, Iterator

import simpletvm.api  # noqa: F401 - imported here so forked children start warm
import tvm  # noqa: F401

from simpletvm import BenchmarkingContext, SimpleTVM

from .grid import calls_for

Emit = Callable[[dict[str, Any]], None]


class ReportingContext(BenchmarkingContext):
    """A BenchmarkingContext that also reports steps and tuning stages as they happen."""

    def __init__(self, *args, emit: Emit, **kwargs):
        super().__init__(*args, **kwargs)
        self._emit = emit
        self._trials: dict[int, int] = {}

    @contextlib.contextmanager
    def step(self, name: str, **details: Any) -> Iterator[dict[str, Any]]:
        self._emit({"type": "step", "step": name})
        with super().step(name, **details) as record:
            yield record

    def record_stage(self, **stage: Any) -> None:
        super().record_stage(**stage)
        self._trials[stage["task"]] = stage.get("trials") or 0
        self._emit({"type": "stage", "stage": stage["stage"], "task": stage["task"],
                    "num_tasks": self.model.get("num_tasks"),
                    "trials": sum(self._trials.values())})


def execute(spec: dict[str, Any], emit: Emit) -> dict[str, Any]:
    """Run SimpleTVM for one spec; failures are returned as data, never raised."""
    calls = calls_for(spec["params"])
    context = calls["context"]
    started = time.time()
    ctx = ReportingContext(context.pop("target"), emit=emit, store=spec["store"],
                           run_id=spec["run_id"], **context)
    tuning = calls["autotune"]
    if spec.get("pretuned"):  # the scheduler already tuned it under this run id
        _adopt_saved_context(ctx)
        tuning = None
    if tuning is not None:
        expected = tuning.get("trials", 64)
        emit({"type": "tuning", "trials_per_task": expected,
              "total_trials": tuning.get("total_trials")})
    result: dict[str, Any] = {"status": "ok", "error": None, "run_id": ctx.run_id}
    try:
        tracker = spec.get("rpc_tracker")
        if tuning is not None and tracker:
            ctx.device_key = spec["device_key"]
        stvm = SimpleTVM(ctx, rpc_tracker=tuple(tracker) if tuning is not None and tracker
                         else None)
        stvm.from_model(**calls["from_model"])
        if spec.get("pretuned"):
            ctx.model["num_tasks"] = ctx.tuning.get("num_tasks")
        if tuning is not None:
            stvm.autotune(**tuning)
        stvm.build(**calls["build"])
        if calls["save"]:
            stvm.save()
        if calls["evaluate"] is not None:
            stvm.evaluate(**calls["evaluate"])
    except Exception as error:  # noqa: BLE001 - a failed run is a row, not a crash
        result.update(status="failed", error=_error_text(error))
        traceback.print_exc()
    finally:
        result["context_path"] = str(ctx.save())
        result["simpletvm_s"] = time.time() - started
    return result


def _adopt_saved_context(ctx: BenchmarkingContext) -> None:
    """Continue the context the scheduler's tuning job saved: its steps, stages and
    tuning summary belong to this run's row."""
    saved = BenchmarkingContext.load(ctx.run_id, store=ctx.store)
    ctx.steps = [step for step in saved.steps if step["step"] == "autotune"]
    ctx.stages, ctx.tuning, ctx.parameters = saved.stages, saved.tuning, saved.parameters


def child_main(spec: dict[str, Any], conn) -> None:
    """The body of a run's process (started by :mod:`superb.runner`)."""
    os.setsid()  # its own process group: the parent stops the run and all it started
    _die_with_parent()
    with open(spec["log"], "ab", buffering=0) as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    print(f"--- superb run {spec['key']} attempt {spec.get('attempt', 1)} "
          f"run_id {spec['run_id']} pid {os.getpid()}", flush=True)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)

    def emit(event: dict[str, Any]) -> None:
        conn.send(event)

    result = execute(spec, emit)
    conn.send({"type": "result", **result})
    conn.close()
    sys.stdout.flush()
    sys.stderr.flush()


def _die_with_parent() -> None:
    """Ask Linux to kill this process when the one that forked it ends (the fork
    server ends with superb, even on SIGKILL), so a killed sweep leaves no run behind."""
    parent = os.getppid()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent ended before the request took effect
        os._exit(1)


def _error_text(error: BaseException, limit: int = 500) -> str:
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m superb.worker SPEC.json", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        spec = json.load(handle)
    result = execute(spec, lambda event: print(json.dumps(event), file=sys.stderr))
    print(json.dumps(result, indent=2))
    return 0 if result["status"] == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
