"""Each tuned kernel against its default schedule, timed inside the built model.

The search ranks a task's candidates by their time alone. Inside the model a kernel finds
its input just written by the layer before and its weights where the rest of the model
left them, and there the fastest record alone can lose to the task's default schedule
(:mod:`simpletvm.compiler.default_schedules`): on MobileNetV2 the default ran faster in
14 of 31 kernels of a 15-minute tuning (BENCHMARKS.md). :func:`choose_in_model` builds the
model twice, with the records and with every task's default schedule, times every kernel
of both builds in the same alternating rounds (:func:`simpletvm.runtime.in_situ.time_builds`),
and keeps each finding in the record store; a build then applies a record only where it
was not beaten (:meth:`RecordDatabase.with_in_model_choices`). A kernel without parallel
loops is not seen by the timing and keeps its record.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from simpletvm.compiler.lowering import compile_fused, extract_tasks
from simpletvm.runtime.in_situ import WHOLE, time_builds
from simpletvm.targets import ResolvedTarget
from simpletvm.tuning.database import IN_MODEL_MARGIN, RecordDatabase
from simpletvm.tuning.records import default_faster


@dataclass(frozen=True)
class KernelFinding:
    """One task's record and default schedule, timed inside the model (ms a model run)."""

    task: str
    record_ms: float
    default_ms: float

    @property
    def default_wins(self) -> bool:
        return default_faster(self.record_ms, self.default_ms, IN_MODEL_MARGIN)


@dataclass(frozen=True)
class InModelTiming:
    """Both builds timed inside the model: each tuned kernel's finding, and each build's
    median ms a run."""

    findings: list[KernelFinding]
    records_model_ms: float
    defaults_model_ms: float

    @property
    def chosen_model_ms(self) -> float:
        """What the model built from the findings runs in: the records' build less what
        each default schedule that won saves."""
        return self.records_model_ms - sum(
            f.record_ms - f.default_ms for f in self.findings if f.default_wins
        )


def choose_in_model(
    fused,
    target: ResolvedTarget,
    database: RecordDatabase,
    inputs: list[tuple[list[int], str]],
    *,
    threads: int,
    rounds: int = 10,
    runs: int = 10,
) -> InModelTiming:
    """Time the kernels of ``fused`` built with ``database``'s records against the same
    model built with default schedules only, on this machine's CPU, and note each tuned
    kernel's finding in the database's store. ``inputs``: the model's (shape, dtype)."""
    tasks = {task.task_name: task for task in extract_tasks(fused, target)}
    with tempfile.TemporaryDirectory(prefix="simpletvm-in-model-") as scratch:
        libraries = []
        for label, records in (("records", database), ("defaults", None)):
            path = Path(scratch) / f"{label}.so"
            compile_fused(fused, target, records).export_library(str(path))
            libraries.append(path)
        tuned, defaults = time_builds(libraries, inputs, threads=threads, rounds=rounds, runs=runs)
    findings = []
    for name, task in tasks.items():
        if name not in tuned or name not in defaults:
            continue  # no parallel loop in one of the builds: the timing cannot tell
        finding = KernelFinding(name, tuned[name], defaults[name])
        if database.note_in_model(task.dispatched[0], tuned[name] / 1e3, defaults[name] / 1e3):
            findings.append(finding)
    return InModelTiming(findings, tuned[WHOLE], defaults[WHOLE])
