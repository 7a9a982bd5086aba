"""The in-model round: each task's fastest record against the schedule chosen before it,
timed inside the built model.

The search ranks a task's candidates by their time alone. Inside the model a kernel finds
its input just written by the layer before and its weights where the rest of the model
left them, and there the fastest record alone can lose to the task's default schedule
(:mod:`simpletvm.compiler.default_schedules`) or to a record chosen earlier
(BENCHMARKS.md). The round's terms:

- **challenger**: a task's fastest record (a contested layer's form the kernels'
  estimate favours); **incumbent**: what the last round chose (the default schedule, or
  the default form, before any round).
- **contest**: what the round times apart, one task in both builds, or one contested
  layer whose form differs between them (the tasks only one form has against those
  only the other has).
- **kept as a whole**: the round keeps every incumbent, because the model its choices
  make was not faster than the incumbents' build.

:func:`choose_in_model` builds the model twice, with the challengers and with the
incumbents, times every kernel of both builds in the same alternating rounds
(:func:`simpletvm.runtime.in_situ.time_builds`), decides (:func:`round_choices`) and
keeps each contest's choice in the record store (:mod:`simpletvm.tuning.in_model_store`).
A challenger is chosen only when it ran faster by more than :data:`IN_MODEL_MARGIN`, and
only when the model built from the round's choices is faster as a whole than the
incumbents' build, by more than :data:`MODEL_MARGIN`: when the choices mix challengers
and incumbents, that model is built and timed against the incumbents' build too. When
the challengers short of the kernel margin save time in sum, the challengers' build as a
whole is the model. So each round keeps or improves the model, as far as the timing can
tell. A build then applies the choices (:meth:`RecordDatabase.with_in_model_choices`). A
kernel without parallel loops is not seen by the timing: it follows the model, so the
module built afterwards is the one timed. When the round is due, and what a budget keeps
for it: :class:`simpletvm.in_model_round.InModelRound`.
"""

from __future__ import annotations

import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from simpletvm.compiler.build import compile_fused
from simpletvm.compiler.conv_forms import ConvForms, form_name, layer_key, tasks_by_key
from simpletvm.compiler.winograd import ConvSignature
from simpletvm.runtime.in_situ import WHOLE, time_builds
from simpletvm.targets import ResolvedTarget
from simpletvm.tuning.database import RecordDatabase, best_latency_s

# a challenger replaces its incumbent only when it ran this much faster inside the model:
# within it, the two are alike as far as the timing can tell
IN_MODEL_MARGIN = 0.03
# and the round's choices stand only when the model built from them ran this much faster
# as a whole: a smaller gain is what two timings of one module differ by
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
    by whether their fastest record was chosen with the model; ``threads``: the count
    the model built from the choices runs fastest on. Each build's ms is on its own
    faster count, as a build would run it. ``mixed_model_ms`` and ``mixed_against_ms``:
    the mixed build and the incumbents' build, timed in the same rounds (None when the
    choices did not mix).
    ``form_switches``: the contested layers timed in another form than the one chosen
    before, by whether the round switched them (their findings are among ``findings``)."""

    findings: list[KernelFinding]
    challengers_model_ms: float
    incumbents_model_ms: float
    kept_as_a_whole: bool
    unseen: dict[str, bool]
    threads: int
    mixed_model_ms: float | None = None
    mixed_against_ms: float | None = None
    form_switches: dict[str, bool] = field(default_factory=dict)

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

    def step_fields(self) -> dict[str, Any]:
        """What the context's ``in_model`` step records of the round."""
        return {
            "kernels": len(self.findings),
            "threads": self.threads,
            "incumbents_kept": [f.task for f in self.kept],
            "challengers_model_ms": self.challengers_model_ms,
            "incumbents_model_ms": self.incumbents_model_ms,
            "chosen_model_ms": self.chosen_model_ms,
            "kept_as_a_whole": self.kept_as_a_whole,
            "unseen_kernels": self.unseen,
            "mixed_model_ms": self.mixed_model_ms,
            "mixed_against_ms": self.mixed_against_ms,
            "form_switches": self.form_switches,
        }


class RoundDecision(NamedTuple):
    """What :func:`round_choices` decides: by contest, whether its challenger is chosen,
    and whether the round kept every incumbent as a whole."""

    chosen: dict[str, bool]
    kept_as_a_whole: bool


@dataclass(frozen=True)
class _Contest:
    """What a round times apart: one task in both builds (its name in each), or a
    contested layer whose form differs between them (the names of the tasks only each
    form has). ``challenger_tasks``: the tasks whose fastest record the challenger's side
    runs; ``incumbent_only_tasks``: the tasks only the incumbent's form has, kept as they
    were timed when that form stays."""

    challenger_names: tuple[str, ...]
    incumbent_names: tuple[str, ...]
    challenger_tasks: tuple
    incumbent_only_tasks: tuple = ()
    layer: ConvSignature | None = None
    form: int | None = None  # the layer's form on the challenger's side

    def ms(self, challengers: dict[str, float], incumbents: dict[str, float]):
        """(challenger, incumbent) ms a model run, or None when a side has a kernel the
        timing did not see (no parallel loop)."""
        sides = ((self.challenger_names, challengers), (self.incumbent_names, incumbents))
        if not all(names and all(n in medians for n in names) for names, medians in sides):
            return None
        return tuple(sum(medians[n] for n in names) for names, medians in sides)


def choose_in_model(
    forms: ConvForms,
    target: ResolvedTarget,
    database: RecordDatabase,
    inputs: list[tuple[list[int], str]],
    *,
    threads: int,
    choose_threads: bool = False,
    rounds: int = 10,
    runs: int = 10,
) -> InModelTiming:
    """Time the model's kernels built with ``database``'s fastest records, each contested
    layer in the form they favour (``forms``: the model's :class:`ConvForms`), against
    the model built as the last round chose (the schedules and forms chosen before), on
    this machine's CPU, and note each choice in the database's store. ``inputs``: the
    model's (shape, dtype). A layer whose form differs between the two builds is timed
    as one: the tasks only its challenger form has against those only its incumbent
    form has. On ``threads`` threads, or with ``choose_threads`` on those and on 1: the
    kernels are compared on the count the challengers' build runs faster on, and each
    build as a whole on its own faster count, the one a build would leave the runtime on
    (a small model's kernels can run faster on one, and the host's state moves which:
    the incumbents' build may run faster on the other count)."""
    challenger_module, estimate = forms.choose(partial(best_latency_s, database))
    incumbent_forms = forms.incumbent_forms(database.kept_form)
    incumbent_module = forms.module(incumbent_forms)
    incumbents = database.incumbents()
    contests = _contests(
        forms, target, database, challenger_module, incumbent_module, estimate, incumbent_forms
    )
    with tempfile.TemporaryDirectory(prefix="simpletvm-in-model-") as scratch:

        def export(label: str, module, records: RecordDatabase) -> Path:
            path = Path(scratch) / f"{label}.so"
            compile_fused(module, target, records).export_library(str(path))
            return path

        # the two builds at once: most of a build is TVM's compiler, outside the GIL
        with ThreadPoolExecutor(max_workers=2) as pool:
            builds = [
                pool.submit(export, "challengers", challenger_module, database),
                pool.submit(export, "incumbents", incumbent_module, incumbents),
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
        challengers, kept = first.medians  # kernels compared where the challengers run
        kept_model_ms, kept_threads = first.fastest(1)
        timed = {}
        for label, contest in contests.items():
            both = contest.ms(challengers, kept)
            if both is not None:
                timed[label] = both
        unseen = [label for label in contests if label not in timed]
        before = {label: _on_default(incumbents, contests[label]) for label in timed}
        choices, kept_as_a_whole = round_choices(timed, unseen, challengers[WHOLE], kept_model_ms)

        mixed_model_ms = mixed_against_ms = None
        # what the build the round keeps runs fastest on
        chosen_threads = first.threads if any(choices.values()) else kept_threads
        if any(choices.values()) and not all(choices.values()):
            # a model neither build was: built from the choices, it must beat the
            # incumbents' build as a whole, or the round keeps every incumbent
            mixed = export(
                "chosen",
                forms.module(_chosen_forms(contests, choices, incumbent_forms)),
                database.with_planned_choices(_planned(contests, choices)),
            )
            again = time_builds(
                [mixed, libraries[1]],
                inputs,
                threads=threads,
                choose_threads=choose_threads,
                rounds=rounds,
                runs=runs,
            )
            (mixed_model_ms, mixed_threads), (mixed_against_ms, against_threads) = (
                again.fastest(build) for build in (0, 1)
            )
            if _faster(mixed_model_ms, mixed_against_ms):
                chosen_threads = mixed_threads
            else:
                choices, kept_as_a_whole = dict.fromkeys(choices, False), True
                chosen_threads = against_threads
    # an unseen kernel is noted with the timings of the two models it was chosen by
    chosen_ms = mixed_model_ms if mixed_model_ms is not None else challengers[WHOLE]
    against_ms = mixed_against_ms if mixed_against_ms is not None else kept_model_ms
    for label, challenger_chosen in choices.items():
        challenger_ms, incumbent_ms = timed.get(label, (chosen_ms, against_ms))
        contest = contests[label]
        for task in contest.challenger_tasks:
            database.note_in_model(
                task.dispatched[0],
                challenger_ms / 1e3,
                incumbent_ms / 1e3,
                challenger_chosen=challenger_chosen,
            )
        # a layer's form that stays keeps its tasks as timed
        for task in () if challenger_chosen else contest.incumbent_only_tasks:
            database.note_in_model(
                task.dispatched[0], challenger_ms / 1e3, incumbent_ms / 1e3, challenger_chosen=False
            )
    chosen_forms = _chosen_forms(contests, choices, incumbent_forms)
    for choice in estimate:
        database.note_form(layer_key(choice.layer), choice.estimated, chosen_forms[choice.layer])
    findings = [
        KernelFinding(label, challenger_ms, incumbent_ms, before[label], choices[label])
        for label, (challenger_ms, incumbent_ms) in timed.items()
    ]
    return InModelTiming(
        findings,
        challengers[WHOLE],
        kept_model_ms,
        kept_as_a_whole,
        {label: choices[label] for label in unseen},
        chosen_threads,
        mixed_model_ms,
        mixed_against_ms,
        {label: choices[label] for label, c in contests.items() if c.layer is not None},
    )


def _contests(
    forms: ConvForms,
    target: ResolvedTarget,
    database: RecordDatabase,
    challenger_module,
    incumbent_module,
    estimate: list,
    incumbent_forms: dict,
) -> dict[str, _Contest]:
    """By label, what a round times apart: each contested layer whose form the estimate
    moves (labelled "<layer>: <form> -> <form>"), then each tuned task both builds have
    (labelled by its name in the challengers' build)."""
    in_challengers = tasks_by_key(challenger_module, target)
    in_incumbents = tasks_by_key(incumbent_module, target)
    contests = {}
    for choice in estimate:
        form, before = choice.estimated, incumbent_forms[choice.layer]
        if form == before:
            continue
        ours = forms.form_tasks(choice.layer, form).keys() - in_incumbents.keys()
        theirs = forms.form_tasks(choice.layer, before).keys() - in_challengers.keys()
        label = f"{choice.layer}: {form_name(before)} -> {form_name(form)}"
        contests[label] = _Contest(
            tuple(in_challengers[key].task_name for key in sorted(ours)),
            tuple(in_incumbents[key].task_name for key in sorted(theirs)),
            tuple(in_challengers[key] for key in sorted(ours)),
            tuple(in_incumbents[key] for key in sorted(theirs)),
            choice.layer,
            form,
        )
    for key, task in in_challengers.items():
        if key in in_incumbents and database.has_record(task.dispatched[0]):
            contests[task.task_name] = _Contest(
                (task.task_name,), (in_incumbents[key].task_name,), (task,)
            )
    return contests


def _on_default(incumbents: RecordDatabase, contest: _Contest) -> bool:
    """Whether the incumbent's side of a contest runs default schedules only."""
    tasks = contest.incumbent_only_tasks if contest.layer is not None else contest.challenger_tasks
    return all(
        not incumbents.has_record(task.dispatched[0])
        or incumbents.in_model_schedule(task.dispatched[0]) == "default"
        for task in tasks
    )


def _chosen_forms(contests: dict[str, _Contest], choices: dict[str, bool], incumbent_forms: dict):
    """Each contested layer's form after the round: the challenger's where its contest
    won, else the incumbent's."""
    won = {
        c.layer: c.form for label, c in contests.items() if c.layer is not None and choices[label]
    }
    return {**incumbent_forms, **won}


def _planned(contests: dict[str, _Contest], choices: dict[str, bool]) -> dict:
    """Workload module -> whether its fastest record is chosen, as a build of the round's
    choices reads them before they are kept."""
    planned = {}
    for label, challenger_chosen in choices.items():
        planned.update(
            {task.dispatched[0]: challenger_chosen for task in contests[label].challenger_tasks}
        )
        planned.update({task.dispatched[0]: False for task in contests[label].incumbent_only_tasks})
    return planned


def round_choices(
    timed: dict[str, tuple[float, float]],
    unseen: list[str],
    challengers_model_ms: float,
    incumbents_model_ms: float,
) -> RoundDecision:
    """Whether each kernel's challenger is chosen, from its (challenger, incumbent) ms a
    model run: when faster by :data:`IN_MODEL_MARGIN`, and only if the model built from
    those choices, as the two builds' timings estimate it (the challengers' build less
    what each incumbent kept saves), runs faster than the incumbents' build by
    :data:`MODEL_MARGIN`; otherwise the round keeps every incumbent, as a whole. When the challengers short of the kernel margin save time in sum (many
    kernels a little faster), the challengers' build as a whole is that model: every
    challenger is chosen when it ran faster than the incumbents' by :data:`MODEL_MARGIN`,
    none otherwise. A kernel of ``unseen`` (not timed apart) follows the model: its
    challenger is chosen when any timed one is (the build kept was timed with it), or,
    with none timed, when the challengers' build was faster by :data:`MODEL_MARGIN`."""
    choices = {
        name: _faster(challenger, incumbent, IN_MODEL_MARGIN)
        for name, (challenger, incumbent) in timed.items()
    }
    chosen_model_ms = challengers_model_ms - sum(
        challenger - incumbent
        for name, (challenger, incumbent) in timed.items()
        if not choices[name]
    )
    if timed and challengers_model_ms < chosen_model_ms:
        # the challengers short of the kernel margin gain in sum: their build as a whole
        # is the model to beat the incumbents' with
        every = _faster(challengers_model_ms, incumbents_model_ms)
        return RoundDecision(
            dict.fromkeys([*timed, *unseen], every), any(choices.values()) and not every
        )
    if any(choices.values()) and not _faster(chosen_model_ms, incumbents_model_ms):
        return RoundDecision(dict.fromkeys([*timed, *unseen], False), True)
    if not timed:
        whole = _faster(challengers_model_ms, incumbents_model_ms)
        return RoundDecision(dict.fromkeys(unseen, whole), False)
    follows = any(choices.values())
    return RoundDecision({**choices, **dict.fromkeys(unseen, follows)}, False)


def _faster(challenger_ms: float, incumbent_ms: float, margin: float = MODEL_MARGIN) -> bool:
    return challenger_ms < incumbent_ms * (1.0 - margin)
