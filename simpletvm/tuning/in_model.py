"""Each task's fastest record against the schedule chosen before it, timed inside the
built model.

The search ranks a task's candidates by their time alone. Inside the model a kernel finds
its input just written by the layer before and its weights where the rest of the model
left them, and there the fastest record alone can lose to the task's default schedule
(:mod:`simpletvm.compiler.default_schedules`) or to a record chosen earlier: on
MobileNetV2 the default ran faster in 14 of 31 kernels of a 15-minute tuning
(BENCHMARKS.md). :func:`choose_in_model` builds the model twice, with the fastest records
(the challengers) and with the schedules chosen before (the incumbents: each task's
default schedule before its first round), times every kernel of both builds in the same
alternating rounds (:func:`simpletvm.runtime.in_situ.time_builds`), and keeps each
round's choice in the record store. A challenger is chosen only when it ran faster by
more than :data:`IN_MODEL_MARGIN`, and only when the model built from the round's choices
is faster as a whole than the incumbents' build, by more than :data:`MODEL_MARGIN` (its
kernels' gains can be noise, lost between the loops, or paid by a neighbour that finds
its data elsewhere): when the choices mix challengers and incumbents, that model is
built and timed against the incumbents' build too. So each round keeps or improves the
model, as far as the timing can tell. A build then applies the choices
(:meth:`RecordDatabase.with_in_model_choices`). A kernel without parallel loops is not
seen by the timing: it follows the model, taking its fastest record when the build the
round keeps was timed with it, so the module built afterwards is the one timed.
"""

from __future__ import annotations

import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from simpletvm.compiler.lowering import compile_fused, extract_tasks
from simpletvm.runtime.in_situ import WHOLE, time_builds
from simpletvm.targets import ResolvedTarget
from simpletvm.tuning.database import RecordDatabase

# a record replaces the schedule chosen before it only when it ran this much faster inside
# the model: within it, the two are alike as far as the timing can tell
IN_MODEL_MARGIN = 0.03
# and the round's choices only when the model built from them ran this much faster as a
# whole: a smaller gain is what two timings of one module differ by, and keeping the
# incumbents then leaves the module as it was, so a later round is never slower
MODEL_MARGIN = 0.01


@dataclass(frozen=True)
class KernelFinding:
    """One task's fastest record (challenger) and the schedule chosen before it
    (incumbent: a record, or the default schedule), timed inside the model (ms a model
    run), and which one the round chose."""

    task: str
    challenger_ms: float
    incumbent_ms: float
    incumbent_is_default: bool
    challenger_chosen: bool

    @property
    def chosen_ms(self) -> float:
        return self.challenger_ms if self.challenger_chosen else self.incumbent_ms


@dataclass(frozen=True)
class InModelTiming:
    """Both builds timed inside the model: each tuned kernel's finding, each build's
    median ms a run, the model built from the round's choices when they mixed
    challengers and incumbents (built and timed against the incumbents' build, ms a run),
    and whether the round kept every incumbent because that model was not faster.
    ``unseen``: the tuned kernels the timing could not tell apart (no parallel loop),
    by whether their fastest record was chosen with the model; ``threads``: what the
    model built from the choices was timed on (each pair of builds is timed on one
    count). ``mixed_model_ms`` and ``mixed_against_ms``: the mixed build and the
    incumbents' build, timed in the same rounds (None when the choices did not mix)."""

    findings: list[KernelFinding]
    challengers_model_ms: float
    incumbents_model_ms: float
    kept_as_a_whole: bool
    unseen: dict[str, bool]
    threads: int
    mixed_model_ms: float | None = None
    mixed_against_ms: float | None = None

    @property
    def chosen_model_ms(self) -> float:
        """What the model built from the choices runs in: the mixed build as timed, else
        the challengers' or the incumbents' build, whichever the round chose."""
        chosen = [f.challenger_chosen for f in self.findings] + list(self.unseen.values())
        if not any(chosen):
            return self.incumbents_model_ms
        if self.mixed_model_ms is not None:
            return self.mixed_model_ms
        return self.challengers_model_ms

    @property
    def kept(self) -> list[KernelFinding]:
        """The findings whose incumbent was kept (the challenger not faster enough)."""
        return [f for f in self.findings if not f.challenger_chosen]


def choose_in_model(
    fused,
    target: ResolvedTarget,
    database: RecordDatabase,
    inputs: list[tuple[list[int], str]],
    *,
    threads: int,
    choose_threads: bool = False,
    rounds: int = 10,
    runs: int = 10,
) -> InModelTiming:
    """Time the kernels of ``fused`` built with ``database``'s fastest records against
    the same model built with the schedules chosen before, on this machine's CPU, and
    note each tuned kernel's choice in the database's store. ``inputs``: the model's
    (shape, dtype). On ``threads`` threads, or with ``choose_threads`` on those or 1,
    whichever the challengers' build (and a mix, in its own timing) runs faster on: the
    count the model built from the round's choices will run on (a small model's
    kernels can run faster on one, and the host's state moves which)."""
    tasks = {task.task_name: task for task in extract_tasks(fused, target)}
    incumbents = database.incumbents()
    with tempfile.TemporaryDirectory(prefix="simpletvm-in-model-") as scratch:

        def export(label: str, records: RecordDatabase) -> Path:
            path = Path(scratch) / f"{label}.so"
            compile_fused(fused, target, records).export_library(str(path))
            return path

        # the two builds at once: most of a build is TVM's compiler, outside the GIL
        with ThreadPoolExecutor(max_workers=2) as pool:
            builds = [
                pool.submit(export, "challengers", database),
                pool.submit(export, "incumbents", incumbents),
            ]
            libraries = [build.result() for build in builds]
        first = time_builds(
            libraries,
            inputs,
            threads=threads,
            choose_threads=choose_threads,
            rounds=rounds,
            runs=runs,
        )
        challengers, kept = first.medians
        tuned = [name for name, task in tasks.items() if database.has_record(task.dispatched[0])]
        # no parallel loop in one of the builds: the timing cannot tell the two apart
        timed = {
            name: (challengers[name], kept[name])
            for name in tuned
            if name in challengers and name in kept
        }
        unseen = [name for name in tuned if name not in timed]
        before = {name: incumbents.in_model_schedule(tasks[name].dispatched[0]) for name in timed}
        wins, kept_as_a_whole = round_choices(timed, unseen, challengers[WHOLE], kept[WHOLE])

        mixed_model_ms = mixed_against_ms = None
        promised_threads = first.threads  # what the build the round keeps was timed on
        if any(wins.values()) and not all(wins.values()):
            # a model neither build was: built from the choices, it must beat the
            # incumbents' build as a whole, or the round keeps every incumbent
            planned = {tasks[name].dispatched[0]: win for name, win in wins.items()}
            mixed = export("chosen", database.with_planned_choices(planned))
            again = time_builds(
                [mixed, libraries[1]],
                inputs,
                threads=threads,
                choose_threads=choose_threads,
                rounds=rounds,
                runs=runs,
            )
            mixed_model_ms, mixed_against_ms = (timing[WHOLE] for timing in again.medians)
            if _faster(mixed_model_ms, mixed_against_ms):
                promised_threads = again.threads
            else:
                wins, kept_as_a_whole = dict.fromkeys(wins, False), True
    # an unseen kernel is noted with the timings of the two models it was chosen by
    chosen_ms = mixed_model_ms if mixed_model_ms is not None else challengers[WHOLE]
    against_ms = mixed_against_ms if mixed_against_ms is not None else kept[WHOLE]
    for name, win in wins.items():
        challenger_ms, incumbent_ms = timed.get(name, (chosen_ms, against_ms))
        database.note_in_model(
            tasks[name].dispatched[0],
            challenger_ms / 1e3,
            incumbent_ms / 1e3,
            challenger_chosen=win,
        )
    findings = [
        KernelFinding(name, challenger_ms, incumbent_ms, before[name] == "default", wins[name])
        for name, (challenger_ms, incumbent_ms) in timed.items()
    ]
    return InModelTiming(
        findings,
        challengers[WHOLE],
        kept[WHOLE],
        kept_as_a_whole,
        {name: wins[name] for name in unseen},
        promised_threads,
        mixed_model_ms,
        mixed_against_ms,
    )


def round_choices(
    timed: dict[str, tuple[float, float]],
    unseen: list[str],
    challengers_model_ms: float,
    incumbents_model_ms: float,
) -> tuple[dict[str, bool], bool]:
    """Whether each kernel's challenger is chosen, from its (challenger, incumbent) ms a
    model run: when faster by :data:`IN_MODEL_MARGIN`, and only if the model built from
    those choices, as the two builds' timings estimate it (the challengers' build less
    what each incumbent kept saves), runs faster than the incumbents' build by
    :data:`MODEL_MARGIN`; otherwise the round keeps every incumbent. Also returns whether
    it did so. A kernel of ``unseen`` (not timed apart) follows the model: its challenger
    is chosen when any timed one is (the build kept was timed with it), or, with none
    timed, when the challengers' build was faster by :data:`MODEL_MARGIN`."""
    wins = {
        name: _faster(challenger, incumbent, IN_MODEL_MARGIN)
        for name, (challenger, incumbent) in timed.items()
    }
    chosen_model_ms = challengers_model_ms - sum(
        challenger - incumbent for name, (challenger, incumbent) in timed.items() if not wins[name]
    )
    if any(wins.values()) and not _faster(chosen_model_ms, incumbents_model_ms):
        return dict.fromkeys([*timed, *unseen], False), True
    if not timed:
        return dict.fromkeys(unseen, _faster(challengers_model_ms, incumbents_model_ms)), False
    follows = any(wins.values())
    return {**wins, **dict.fromkeys(unseen, follows)}, False


def _faster(challenger_ms: float, incumbent_ms: float, margin: float = MODEL_MARGIN) -> bool:
    return challenger_ms < incumbent_ms * (1.0 - margin)
